"""The fault-test topology: three KRaft nodes on loopback, replication factor 3, min ISR 2."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # the stubs do not re-export it
from confluent_kafka.admin._metadata import ClusterMetadata  # the stubs do not re-export it

from deploy.local.stack import LocalStack
from tests.support.clusters import three_nodes


def _metadata_showing(admin: AdminClient, topic: str) -> ClusterMetadata:
    # up() returns once its own client sees the topics led; this client may ask another node,
    # which applies the controller's metadata log a moment later.
    deadline = time.monotonic() + 10
    while True:
        metadata = admin.list_topics(timeout=10)
        if topic in metadata.topics or time.monotonic() > deadline:
            return metadata
        time.sleep(0.1)


def test_three_nodes_replicate_every_topic(tmp_path: Path) -> None:
    settings = three_nodes(tmp_path / "state", partitions=2)
    stack = LocalStack(settings, persistent=False)
    try:
        statuses = stack.up()
        assert [s.name for s in statuses if s.healthy] == ["kafka-1", "kafka-2", "kafka-3", "redis"]
        admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers()})
        metadata = _metadata_showing(admin, "dsh.session.events")
        assert len(metadata.brokers) == 3
        for partition in metadata.topics["dsh.session.events"].partitions.values():
            assert sorted(partition.replicas) == [1, 2, 3]
        resource = ConfigResource(ConfigResource.Type.TOPIC, "dsh.session.events")
        config = admin.describe_configs([resource])[resource].result()
        assert config["min.insync.replicas"].value == "2"
        assert config["retention.ms"].value == "-1"
    finally:
        stack.down()
    assert not any(node.process().is_running() for node in stack.kafka.nodes)
