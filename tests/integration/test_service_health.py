"""A writer's /readyz: not ready until it has restored the partitions it was assigned, then
ready; alive while it restores (issue 23). The projectors' Redis check is exercised on the
whole local stack (test_stack_identity.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from deploy.local.processes import free_ports
from producers.writer import Writer
from servicekit.health import Health
from servicekit.ports import serve_http
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import PARTITIONS, writer_settings
from tests.support.probes import probe
from tests.support.waiting import wait_for


def test_a_writer_is_ready_only_once_its_partitions_are_restored(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    health = Health()
    writer = Writer(topics, writer_settings(), health=health)
    restoring, release = threading.Event(), threading.Event()
    restore: Callable[[Consumer, list[TopicPartition]], list[TopicPartition]]
    restore = writer.ownership.restore

    def held_restore(consumer: Consumer, partitions: list[TopicPartition]) -> list[TopicPartition]:
        restoring.set()
        release.wait(60)
        return restore(consumer, partitions)

    monkeypatch.setattr(writer.ownership, "restore", held_restore)
    (port,) = free_ports(1)
    server = serve_http(port, "DSH_WRITER_METRICS_PORT", health)
    assert server is not None
    thread = threading.Thread(target=writer.run, name="writer", daemon=True)
    try:
        status, body = probe(port, "/readyz")
        assert status == 503 and body["code"] == "NOT_READY"
        assert "not assigned its partitions" in body["checks"]["partitions"]

        thread.start()
        assert restoring.wait(60), "the group never assigned the writer its partitions"
        status, body = probe(port, "/readyz")
        assert status == 503, body
        assert body["checks"]["partitions"] == f"restoring partitions {list(range(PARTITIONS))}"
        assert probe(port, "/livez")[0] == 200  # a restore is progress, not a hang

        release.set()
        wait_for(lambda: probe(port, "/readyz")[0] == 200, 60, "the writer to become ready")
        assert probe(port, "/readyz")[1] == {"status": "ready", "checks": {"partitions": "ok"}}
        assert len(writer.owned()) == PARTITIONS
    finally:
        release.set()
        writer.stop()
        thread.join(30)
        server.shutdown()
        server.server_close()
