"""The writer's per-command work without Kafka: decode, validate with the core, assemble the
event and reply records (``CommandHandler.handle``), in process, timed by CPU. The
transaction's producer is a null sink, so this is the Python share of the writer's cost per
event; the wall-clock benchmark with the broker is ``bench.writer_bench``.

    .venv/bin/python -m bench.writer_hot_path [--per-command 10] [--events 30000] [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from bench.workload import message
from producers import draft
from producers.writer.commands import CommandHandler, Placement
from producers.writer.settings import WriterSettings
from producers.writer.snapshots import Snapshots
from producers.writer.state import Limits, PartitionState
from producers.writer.transaction import Transaction
from schemas import AppendCommand, encode_command
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from servicekit.topics import Topics

PARTITIONS = 8
BATCH = 100  # commands per transaction


class _Record:
    """What ``handle`` reads of a consumed command record."""

    __slots__ = ("_key", "_offset", "_partition", "_value")

    def __init__(self, value: bytes, key: bytes, partition: int, offset: int) -> None:
        self._value, self._key, self._partition, self._offset = value, key, partition, offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return self._key

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return "commands"

    def headers(self) -> list[tuple[str, bytes]]:
        return []


class _NullProducer:
    def produce(self, *args: Any, **kwargs: Any) -> None:
        pass


def run_once(per_command: int, events: int, sessions: int) -> float:
    """CPU µs per event of ``handle`` over fresh state."""
    settings = WriterSettings(metrics_port=0)
    topics = Topics.of(KafkaSettings(bootstrap_servers="unused:1"))
    snapshots = Snapshots(
        topics.snapshots,
        snapshot_every=settings.snapshot_every,
        checkpoint_every=settings.checkpoint_every,
        max_snapshot_bytes=settings.max_snapshot_bytes,
        events_end=lambda _: 0,
    )
    limits = Limits(settings.max_event_bytes, settings.max_command_bytes)
    handler = CommandHandler(topics, Placement(PARTITIONS, PARTITIONS), limits, snapshots)
    partitions = {p: PartitionState(p) for p in range(PARTITIONS)}
    ids = [f"hot-{i}" for i in range(sessions)]
    records = []
    for i in range(events // per_command):
        sid = ids[i % sessions]
        drafts = tuple(
            draft("user/message", message(i * per_command + k), surface_op="append")
            for k in range(per_command)
        )
        value = encode_command(AppendCommand(f"r{i}", "client-1", sid, drafts))
        records.append(_Record(value, sid.encode(), partition_for(sid, PARTITIONS), i))
    old = gc.get_threshold()
    gc.set_threshold(WriterSettings().gc_threshold, *old[1:])  # as the service runs
    try:
        started = time.process_time()
        txn = Transaction(0, _NullProducer())  # type: ignore[arg-type]
        for i, record in enumerate(records):
            if i % BATCH == 0:  # a transaction's journal lives as long as its batch
                txn = Transaction(0, _NullProducer())  # type: ignore[arg-type]
            handler.handle(record, partitions[record.partition()], txn)
        return (time.process_time() - started) / events * 1e6
    finally:
        gc.set_threshold(*old)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-command", type=int, default=10)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = [run_once(args.per_command, args.events, args.sessions) for _ in range(args.runs)]
    each = ", ".join(f"{r:.1f}" for r in runs)
    print(
        f"writer CommandHandler.handle, {args.per_command} per command: median "
        f"{statistics.median(runs):.1f} µs CPU per event (runs: {each})"
    )


if __name__ == "__main__":
    main()
