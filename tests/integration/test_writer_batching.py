"""DSH_WRITER_MIN_TRANSACTION_INTERVAL_MS against the real broker: under load, batches (one
transaction each) start at least the interval apart and take every command that came
meanwhile; after a quiet spell a command is taken at once. A batch of large commands is cut
into transactions of DSH_WRITER_BATCH_MAX_BYTES, and one larger than the producer's queue
commits too."""

from __future__ import annotations

import itertools
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import Consumer, Message
from prometheus_client import REGISTRY

from producers import SessionClient
from producers.writer import Writer
from producers.writer.pipeline import Pipeline
from producers.writer.transaction import Transaction
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
        # When the writer took the batch, by its own clock: a pause before _process is not
        # the writer's doing.
        batches.append((writer._last_batch_at, len(records)))
        process(writer, records)

    monkeypatch.setattr(Writer, "_process", recorded)
    sessions = [f"batching-{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]
    settings = writer_settings(min_transaction_interval_ms=int(INTERVAL_S * 1000))
    # How long each batch waited for more commands, as the writer told its consumer: whether
    # it waits is the writer's doing, how soon a command reaches it is the machine's.
    waits: list[float] = []

    class Waits(Consumer):
        def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
            waits.append(timeout)
            return super().consume(num_messages, timeout)

    def made(config: dict[str, Any]) -> Consumer:
        return Waits(config) if config.get("group.id") == settings.group_id else Consumer(config)

    monkeypatch.setattr(kafka_clients, "Consumer", made)
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
        taken = len(waits)
        client.append(sessions[0], "user/message", user("late"), surface_op="append")
        late = waits[taken:]

    # Every session has one command in flight at a time: without the interval each would
    # mostly go alone, about SESSIONS * APPENDS batches a few ms apart.
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(loaded)]
    assert all(gap >= INTERVAL_S * 0.99 for gap in gaps), gaps
    assert sum(n for _, n in loaded) == SESSIONS * APPENDS
    # Sessions' commands share batches (on a loaded machine a reply and the command after it
    # can miss a batch, so not as few as APPENDS + 1).
    assert len(loaded) <= SESSIONS * APPENDS // 2, loaded
    # The last batch before it is more than the interval ago: the command is taken at once,
    # its batch waiting for no more (however long it took to reach the writer).
    assert late and late[0] == 0, late


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


def test_a_backlog_of_large_commands_is_cut_into_transactions_of_at_most_the_byte_cap(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each append puts its events in the transaction twice (the events, the reply): a batch
    of large commands made one transaction of every command taken, however many bytes; now a
    transaction takes no more commands once its records reach the cap."""
    cap, text = 64 * 1024, "x" * 20_000  # about 40 KiB of records a command
    sizes: list[tuple[int, int]] = []  # (bytes, commands) of each transaction
    finish = Pipeline.finish

    def recorded(pipeline: Pipeline, txn: Transaction, records: Any, *args: Any) -> None:
        sizes.append((txn.size, len(records)))
        finish(pipeline, txn, records, *args)

    monkeypatch.setattr(Pipeline, "finish", recorded)
    sid = f"large-{uuid.uuid4().hex[:8]}"
    with SessionClient(settings=topics, timeout=60) as client:
        # On the commands topic before the writer runs: one backlog, fetched at once.
        pending = [
            client.append_async(sid, "user/message", user(f"u{i}", text), surface_op="append")
            for i in range(30)
        ]
        settings = writer_settings(batch_max_bytes=cap, snapshot_every=0)
        with running_writer(topics, settings):
            assert [f.result(60).seq for f in pending] == list(range(30))
        assert len(client.read_log(sid).events()) == 30
    assert sum(n for _, n in sizes) == 30
    # Under the cap before its last command, which takes about 40 KiB.
    assert all(size < cap + 48 * 1024 for size, _ in sizes), sizes
    assert max(n for _, n in sizes) <= 2, sizes
