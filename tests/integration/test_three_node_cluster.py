"""The fault-test topology: three KRaft nodes on loopback, replication factor 3, min ISR 2; and
what depends on more than one broker leading a topic (the export's prefetch)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # the stubs do not re-export it
from confluent_kafka.admin._metadata import ClusterMetadata  # the stubs do not re-export it

from deploy.local.stack import ComponentStatus, LocalStack
from projectors.export import export
from projectors.export.budget import MIB, split
from servicekit.topics import leading_brokers
from tests.support.clusters import three_nodes
from tests.support.prefetch import PrefetchWatch
from tests.support.topics import committed_events, fresh_topics
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalStack, list[ComponentStatus]]]:
    """One cluster for the module (starting it takes about 20 s): the stack and its status once
    up; its processes are all gone after ``down``."""
    settings = three_nodes(tmp_path_factory.mktemp("three") / "state", partitions=2)
    stack = LocalStack(settings, persistent=False)
    try:
        yield stack, stack.up()
    finally:
        stack.down()
    assert not any(node.process().is_running() for node in stack.kafka.nodes)


def _metadata_showing(admin: AdminClient, topic: str) -> ClusterMetadata:
    # up() returns once its own client sees the topics led; this client may ask another node,
    # which applies the controller's metadata log a moment later.
    deadline = time.monotonic() + 10
    while True:
        metadata = admin.list_topics(timeout=10)
        if topic in metadata.topics or time.monotonic() > deadline:
            return metadata
        time.sleep(0.1)


def test_three_nodes_replicate_every_topic(
    cluster: tuple[LocalStack, list[ComponentStatus]],
) -> None:
    stack, statuses = cluster
    settings = stack.settings
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


# Three partitions per broker of 1.5 MiB each: a broker answers a fetch with 1 MiB of each of
# its partitions (librdkafka's max.partition.fetch.bytes) up to fetch.max.bytes.
LEADERS_PARTITIONS = 9
LEADERS_RECORDS = 24
LEADERS_DATA = 64 * 1024


def test_the_export_sizes_its_fetches_by_the_brokers_leading_the_topic(
    cluster: tuple[LocalStack, list[ComponentStatus]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each broker leading partitions has a fetch of its own in flight, and librdkafka adds
    each response whole to the one queue all partitions share (its statistics' ``fetchq_size``).
    The export counts three leaders and gives each a third of the fetches' share (1 MiB of 3):
    the queue overshoots its limit by three such fetches at most. Sized as for one leader, each
    fetch was 3 MiB, and the first three answers landed 9 MiB on a 3 MiB queue."""
    stack, _ = cluster
    kafka = fresh_topics(stack.settings.bootstrap_servers(), LEADERS_PARTITIONS, "test-leaders")
    committed_events(kafka, LEADERS_PARTITIONS, LEADERS_RECORDS, LEADERS_DATA)
    # The controller spreads the leaders three a broker; a broker fenced a moment on a loaded
    # machine hands its share on until it is back and preferred again.
    admin, topic = AdminClient(kafka.client_config()), kafka.topic("events")
    wait_for(
        lambda: leading_brokers(admin.list_topics(topic, 10).topics[topic]) == 3,
        120,
        "every broker leading partitions of the topic",
    )
    budget = 96 * MIB
    shares = split(budget, 3)
    assert (shares.queue, shares.fetch) == (3 * MIB, MIB)
    watch = PrefetchWatch(shares.queue)
    watch.install(monkeypatch)
    with caplog.at_level(logging.INFO, logger="projectors"):
        result = export(tmp_path / "export", kafka=kafka, format="avro", buffer_bytes=budget)

    assert result.records == LEADERS_PARTITIONS * LEADERS_RECORDS
    assert "9 partitions led by 3 broker(s)" in caplog.text
    [reader] = watch.made
    assert reader["fetch.max.bytes"] == shares.fetch
    assert reader["queued.max.messages.kbytes"] * 1024 == shares.queue
    assert watch.queued, "librdkafka reported no statistics"
    assert shares.queue <= max(watch.queued) <= shares.queue + 3 * shares.fetch
