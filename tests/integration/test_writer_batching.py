"""DSH_WRITER_MIN_TRANSACTION_INTERVAL_MS against the real broker: under load, batches (one
transaction each) start at least the interval apart and take every command that came
meanwhile; after a quiet spell a command is taken at once."""

from __future__ import annotations

import itertools
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import REGISTRY

from producers import SessionClient
from producers.writer import Writer
from servicekit import kafka_clients
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    running_writer,
    writer_settings,
)
from tests.support.builders import user

INTERVAL_S = 1.0
SESSIONS = 5
APPENDS = 3


def test_batches_start_an_interval_apart_under_load_and_at_once_after_a_quiet_spell(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[tuple[float, int]] = []  # (when it began, commands in it)
    process = Writer._process

    def recorded(writer: Writer, records: list[Any]) -> None:
        batches.append((time.monotonic(), len(records)))
        process(writer, records)

    monkeypatch.setattr(Writer, "_process", recorded)
    sessions = [f"batching-{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]
    settings = writer_settings(min_transaction_interval_ms=int(INTERVAL_S * 1000))
    with (
        running_writer(topics, settings),
        SessionClient(settings=topics, timeout=30) as client,
    ):

        def appends(sid: str) -> None:
            for i in range(APPENDS):
                client.append(
                    sid, "user/message", user(f"u{i}"), surface_op="append", expected_seq=i
                )

        with ThreadPoolExecutor(SESSIONS) as pool:
            for done in [pool.submit(appends, sid) for sid in sessions]:
                done.result(60)
        loaded = list(batches)

        time.sleep(INTERVAL_S * 1.2)
        sent = time.monotonic()
        client.append(sessions[0], "user/message", user("late"), surface_op="append")
        quiet_start = batches[-1][0] - sent

    # Every session has one command in flight at a time: without the interval each would
    # mostly go alone, about SESSIONS * APPENDS batches a few ms apart.
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(loaded)]
    assert all(gap >= INTERVAL_S * 0.99 for gap in gaps), gaps
    assert sum(n for _, n in loaded) == SESSIONS * APPENDS
    assert len(loaded) <= APPENDS + 2, loaded  # sessions' commands share batches
    # The last batch before it is more than the interval ago: nothing to wait for.
    assert quiet_start < INTERVAL_S / 2, quiet_start


def test_a_batch_larger_than_the_producers_queue_commits_instead_of_ending_the_writer(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog taken in one batch produces more records than librdkafka's queue holds
    (queue.buffering.max.messages, here 10 instead of 100,000): the writer waits for the
    brokers to take them, where it used to fail with BufferError, on every restart again."""
    made = kafka_clients.producer

    def small_queue(kafka: KafkaSettings, **config: Any) -> Any:
        if "transactional.id" in config:  # the writer's
            config["queue.buffering.max.messages"] = 10
        return made(kafka, **config)

    def queue_full() -> float:
        return REGISTRY.get_sample_value("dsh_writer_producer_queue_full_total") or 0.0

    monkeypatch.setattr(kafka_clients, "producer", small_queue)
    sid = f"backlog-{uuid.uuid4().hex[:8]}"
    before = queue_full()
    with SessionClient(settings=topics, timeout=60) as client:
        # On the commands topic before any writer runs: one backlog, taken in large batches.
        pending = [
            client.append_async(sid, "user/message", user(f"u{i}"), surface_op="append")
            for i in range(100)
        ]
        with running_writer(topics, writer_settings()):
            assert [f.result(60).seq for f in pending] == list(range(100))
        assert queue_full() > before
        assert len(client.read_log(sid).events()) == 100
