"""``dsh replay``: rebuild read models from the events topic — some sessions, or all of them.

Each session is rebuilt into its keys inside one MULTI (delete, then every event through the
same apply script), so a reader sees either the old projection or the new one. A partition's
sessions are rebuilt from its records up to the end the scan saw; a projector running
meanwhile may already have applied records after that end, which the rewrite sets back, so
the replay then reads the partition on from that end and applies what it finds to the
sessions it rebuilt, next seq only, as a projector does (a projector meanwhile at worst
finds a gap on its next event and rebuilds that session again). The whole topic is read one
partition at a time, so memory holds one partition's sessions.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from projectors.errors import ProjectorError, SessionUnknownError
from projectors.records import Poison, Record
from projectors.runtime import Runtime
from projectors.topic_reader import offsets_in, scan_partitions
from servicekit.gc_tuning import young_gc_threshold
from servicekit.partitioning import partition_for
from servicekit.progress import Progress
from servicekit.settings import KafkaSettings
from servicekit.topics import partition_counts


@dataclass
class ReplayResult:
    sessions: int
    records: int
    applied: int  # events applied, summed over the projections
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


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
    partitions = partition_counts(kafka, [topic], 10.0)[topic]
    started = time.perf_counter()
    wanted = list(session_ids)
    sessions = records = applied = 0
    unknown: list[str] = []
    if wanted:
        by_partition: dict[int, set[str]] = defaultdict(set)
        for sid in wanted:
            by_partition[partition_for(sid, partitions)].add(sid)
        for p, sids in by_partition.items():
            found: dict[str, list[Record | Poison]] = {sid: [] for sid in sids}
            ends: dict[int, int] = {}
            with ExitStack() as marks:
                for rt in runtimes:
                    marks.enter_context(rt.rebuilds.marked(sids, "replay"))
                for item in scan_partitions(kafka, topic, [p], on_end=ends.__setitem__):
                    if item.session_id in found:
                        found[item.session_id].append(item)
                # No events of it: a wrong id, whose read models a rebuild would only empty.
                unknown += sorted(sid for sid, items in found.items() if not items)
                found = {sid: items for sid, items in found.items() if items}
                records += sum(len(items) for items in found.values())
                sessions += len(found)
                applied += sum(rt.rebuild_logs(found, "replay") for rt in runtimes)
                _catch_up(kafka, runtimes, ends, sids)
    else:
        total = offsets_in(kafka, topic, range(partitions))
        workers = _worker_count(runtimes, partitions)
        if workers > 1:
            sessions, records, applied = _in_workers(
                kafka, runtimes, partitions, workers, total, progress
            )
        else:
            sessions, records, applied = _replay_partitions(
                kafka, runtimes, range(partitions), total, progress
            )
    if unknown:
        replayed = f"; the {sessions} other(s) named were replayed" if sessions else ""
        raise SessionUnknownError(
            f"no event of session(s) {', '.join(unknown)} in {topic}: check the id(s){replayed}"
        )
    return ReplayResult(sessions, records, applied, time.perf_counter() - started)


def _replay_partitions(
    kafka: KafkaSettings,
    runtimes: Sequence[Runtime[Any]],
    partitions: Iterable[int],
    total: int,
    progress: Progress | None,
) -> tuple[int, int, int]:
    """Rebuild every session of the partitions; returns (sessions, records, events applied)."""
    sessions = records = applied = 0
    # One reader over the partitions, one after the other; a partition's sessions are rebuilt
    # (and freed) as soon as its end is reached: memory holds one partition's logs at most.
    logs: dict[int, dict[str, list[Record | Poison]]] = defaultdict(lambda: defaultdict(list))
    ends: dict[int, int] = {}  # partition → where the scan stopped

    def partition_done(p: int, end: int) -> None:
        nonlocal sessions, applied
        done = logs.pop(p, {})
        sessions += len(done)
        applied += sum(rt.rebuild_logs(done, "replay") for rt in runtimes)
        ends[p] = end

    topic = kafka.topic("events")
    for item in scan_partitions(
        kafka, topic, partitions, on_end=partition_done, one_at_a_time=True
    ):
        records += 1
        if item.session_id is not None:
            logs[item.partition][item.session_id].append(item)
        if progress is not None and records % 10_000 == 0:
            progress(records, total)
    if progress is not None:
        progress(records, records)  # the estimate counted transaction markers too
    _catch_up(kafka, runtimes, ends, None)
    return sessions, records, applied


def _catch_up(
    kafka: KafkaSettings,
    runtimes: Sequence[Runtime[Any]],
    ends: dict[int, int],
    sessions: set[str] | None,
) -> None:
    """Applies each partition's records from its end in ``ends`` (where the rebuild's scan
    stopped) to its end now, to ``sessions`` (None: every session), next seq only (see the
    module's doc). One reader for all the partitions: setting one up costs about as much as
    the few records there usually are."""
    if not ends:
        return
    tail = [
        item
        for item in scan_partitions(kafka, kafka.topic("events"), ends, start=ends)
        if item.session_id is not None and (sessions is None or item.session_id in sessions)
    ]
    if tail:
        for rt in runtimes:
            rt.catch_up(tail)


def _worker_count(runtimes: Sequence[Runtime[Any]], partitions: int) -> int:
    wanted = max((rt.settings.replay_workers for rt in runtimes), default=1)
    if wanted <= 0:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(wanted, partitions))


def _in_workers(
    kafka: KafkaSettings,
    runtimes: Sequence[Runtime[Any]],
    partitions: int,
    workers: int,
    total: int,
    progress: Progress | None,
) -> tuple[int, int, int]:
    """Forked processes, each rebuilding every ``workers``-th partition: decoding and planning
    take most of a replay's time, and one Python process uses one core. Forked, not spawned,
    so that a worker starts in milliseconds with everything imported; the parent holds no
    Kafka client while it forks, and each worker opens its own Redis connection."""
    context = multiprocessing.get_context("fork")
    done = context.Array("q", workers, lock=False)  # records read so far, per worker
    children = []
    for w in range(workers):
        receiver, sender = context.Pipe(duplex=False)
        share = range(w, partitions, workers)
        child = context.Process(
            target=_worker, args=(kafka, runtimes, share, done, w, sender), daemon=True
        )
        child.start()
        sender.close()
        children.append((child, receiver))
    while any(child.is_alive() for child, _ in children):
        if progress is not None:
            progress(sum(done), total)
        for child, _ in children:
            child.join(0.1)
    totals = [0, 0, 0]  # sessions, records, events applied
    failures = []
    for child, receiver in children:
        reply = receiver.recv() if receiver.poll() else ("error", f"exit code {child.exitcode}")
        if reply[0] == "ok":
            totals = [a + b for a, b in zip(totals, reply[1:], strict=True)]
        else:
            failures.append(str(reply[1]))
    if failures:
        raise ProjectorError(
            f"replay: {len(failures)} of {workers} workers failed: {'; '.join(failures)}",
            code="REPLAY_WORKER_FAILED",
        )
    sessions, records, applied = totals
    if progress is not None:
        progress(records, records)  # the estimate counted transaction markers too
    return sessions, records, applied


def _worker(
    kafka: KafkaSettings,
    runtimes: Sequence[Runtime[Any]],
    partitions: range,
    done: Any,
    slot: int,
    results: Connection,
) -> None:
    for rt in runtimes:
        rt.reconnected()  # never write on the parent's sockets

    def count(records: int, _: int) -> None:
        done[slot] = records

    try:
        outcome = _replay_partitions(kafka, runtimes, partitions, 0, count)
    except BaseException as exc:
        results.send(("error", f"partitions {list(partitions)}: {type(exc).__name__}: {exc}"))
        raise
    results.send(("ok", *outcome))
