"""`KafkaCluster.wait_ready`: a node that is not coming says so, with its log."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.errors import LocalStackError
from deploy.local.kafka import KafkaCluster
from deploy.local.processes import ManagedProcess, free_port_block, free_ports
from deploy.local.settings import LocalStackSettings


@pytest.fixture
def listening_cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    """Three nodes whose ports accept connections (no Kafka behind them), each with a log."""
    base = free_port_block(3)
    settings = LocalStackSettings(
        state_dir=tmp_path, brokers=3, kafka_port=base, controller_port=free_ports(1)[0]
    )
    cluster = KafkaCluster(settings)
    sockets = []
    for node in cluster.nodes:
        node.home.mkdir(parents=True)
        node.process().log_file.write_text(f"node {node.node_id} starting\n")
        sock = socket.create_server(("127.0.0.1", node.port))
        sockets.append(sock)
    try:
        yield cluster
    finally:
        for sock in sockets:
            sock.close()


def test_a_node_that_died_after_its_port_opened_fails_at_once_with_its_log(
    listening_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when a proxy took one of its other listeners' ports: its own port still answers."""
    third = listening_cluster.nodes[2]
    third.process().log_file.write_text("Socket server failed to bind to 127.0.0.1:1: in use\n")
    dead = third.process().name
    monkeypatch.setattr(ManagedProcess, "is_running", lambda self: self.name != dead)
    with pytest.raises(LocalStackError) as raised:
        listening_cluster.wait_ready(timeout_s=60)
    assert "kafka node 3" in raised.value.message
    assert "exited during start-up" in raised.value.message
    assert "failed to bind" in raised.value.message


def test_a_cluster_not_ready_in_time_shows_the_logs_of_the_brokers_missing(
    listening_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ManagedProcess, "is_running", lambda self: True)
    with pytest.raises(LocalStackError) as raised:
        listening_cluster.wait_ready(timeout_s=3)
    assert raised.value.code == "TIMEOUT"
    for node in listening_cluster.nodes:
        assert f"node {node.node_id} starting" in raised.value.message
