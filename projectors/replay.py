"""``dsh replay``: rebuild read models from the events topic — some sessions, or all of them.

Each session is rebuilt into its keys inside one MULTI (delete, then every event through the
same apply script), so a reader sees either the old projection or the new one; a projector
running meanwhile at worst finds a gap on its next event and rebuilds that session again.
The whole topic is read one partition at a time, so memory holds one partition's sessions.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from deploy.config import KafkaSettings
from deploy.topics import partition_for
from projectors.records import Poison, Record
from projectors.runtime import Runtime, young_gc_threshold
from projectors.topic_reader import partition_count, read_sessions, scan_partitions

Progress = Callable[[int, int], None]


@dataclass
class ReplayResult:
    sessions: int
    records: int
    applied: int  # events applied, summed over the projections
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def _watermarks(kafka: KafkaSettings, topic: str, partitions: int) -> list[tuple[int, int]]:
    consumer = Consumer({**kafka.client_config(), "group.id": "dsh-replay-size"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _records_in(kafka: KafkaSettings, topic: str, partitions: int) -> int:
    return sum(max(high - low, 0) for low, high in _watermarks(kafka, topic, partitions))


def replay(
    kafka: KafkaSettings,
    runtimes: Sequence[Runtime[Any]],
    session_ids: Iterable[str] = (),
    progress: Progress | None = None,
) -> ReplayResult:
    threshold = max((rt.settings.gc_threshold for rt in runtimes), default=0)
    with young_gc_threshold(threshold):
        return _replay(kafka, runtimes, session_ids, progress)


def _replay(
    kafka: KafkaSettings,
    runtimes: Sequence[Runtime[Any]],
    session_ids: Iterable[str],
    progress: Progress | None,
) -> ReplayResult:
    topic = kafka.topic("events")
    partitions = partition_count(kafka, topic)
    started = time.perf_counter()
    wanted = list(session_ids)
    sessions = records = applied = 0
    if wanted:
        by_partition: dict[int, set[str]] = defaultdict(set)
        for sid in wanted:
            by_partition[partition_for(sid, partitions)].add(sid)
        for p, sids in by_partition.items():
            found = read_sessions(kafka, topic, p, sids)
            records += sum(len(items) for items in found.values())
            sessions += len(found)
            applied += sum(rt.rebuild_logs(found, "replay") for rt in runtimes)
    else:
        total = _records_in(kafka, topic, partitions)
        # One reader over every partition; a partition's sessions are rebuilt (and freed) as
        # soon as its end is reached.
        logs: dict[int, dict[str, list[Record | Poison]]] = defaultdict(lambda: defaultdict(list))

        def partition_done(p: int) -> None:
            nonlocal sessions, applied
            done = logs.pop(p, {})
            sessions += len(done)
            applied += sum(rt.rebuild_logs(done, "replay") for rt in runtimes)

        for item in scan_partitions(kafka, topic, range(partitions), on_end=partition_done):
            records += 1
            if item.session_id is not None:
                logs[item.partition][item.session_id].append(item)
            if progress is not None and records % 10_000 == 0:
                progress(records, total)
        if progress is not None:
            progress(records, total)
    return ReplayResult(sessions, records, applied, time.perf_counter() - started)


def progress_bar(stream: Any = sys.stderr, width: int = 40) -> Progress:
    started = time.perf_counter()

    def show(done: int, total: int) -> None:
        filled = width if total <= 0 else min(width, width * done // total)
        rate = done / max(time.perf_counter() - started, 1e-9)
        stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} records {rate:,.0f}/s"
        )
        stream.flush()

    return show
