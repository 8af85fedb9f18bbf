"""Restoring one evicted session (:mod:`.residency`) from the topics, when a command or a read
comes for it: its latest snapshot, then its events after that snapshot, exactly as a restore
of the whole partition would find them (:mod:`.restore`).

Everything an eviction points at was committed before the session left memory, so both reads
go to the end as of now and stop at the session's last record. A record not found where the
stub says, or any read failure, is doubt: it is raised as a :class:`KafkaException`, which
makes the writer abort the batch and restore its partitions from the log. A log that is
there but does not rebuild (a corrupt record, a broken invariant) raises its
:class:`~dsh.errors.SessionError`: the session is broken, as a restore would find it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import closing
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from dsh.projections import Interpreter
from producers.writer import metrics
from producers.writer.residency import Evicted
from producers.writer.restore import snapshot_bare
from producers.writer.state import SessionState, rebuild, requests_from_log, reusable_value
from schemas import HEADER_REQUEST, decode_event_frozen, decode_snapshot, header
from servicekit.partition_reader import NOW, PartitionReadError, read_partitions


def _doubt(message: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError._TIMED_OUT, message))


def reload_session(
    reader: Consumer,
    topics: tuple[str, str],
    partition: int,
    session_id: str,
    stub: Evicted,
    interpreters: Mapping[str, Interpreter],
    timeout_s: float,
) -> SessionState:
    """The evicted session's state from the events and snapshots ``topics``, read with the
    ``read_committed`` ``reader``."""
    started = time.monotonic()
    events_topic, snapshots_topic = topics
    key = session_id.encode()
    head: list[dict[str, Any]] = []
    requests: dict[str, tuple[int, int]] = {}
    invariants = stub.invariants
    try:
        if stub.snapshot_from is not None:
            ranges = {partition: (stub.snapshot_from, NOW)}
            with closing(read_partitions(reader, snapshots_topic, ranges, timeout_s)) as found:
                for message in found:
                    if message.key() != key:
                        continue
                    snapshot = decode_snapshot(message.value() or b"")
                    if snapshot.last_seq == stub.snapshot_last:
                        head = list(snapshot.events)
                        requests = {r.request_id: (r.first_seq, r.count) for r in snapshot.requests}
                        if invariants is None:
                            invariants = not snapshot_bare(snapshot)
                        break
            if not head:
                raise _doubt(
                    f"reloading session {session_id!r}: no snapshot to seq "
                    f"{stub.snapshot_last} from offset {stub.snapshot_from} of "
                    f"{snapshots_topic}/{partition}"
                )
        tail: list[dict[str, Any]] = []
        values: list[bytes | None] = []
        request_ids: list[str | None] = []
        if len(head) < stub.length:
            ranges = {partition: (stub.events_from, NOW)}
            with closing(read_partitions(reader, events_topic, ranges, timeout_s)) as found:
                for message in found:
                    if message.key() != key:
                        continue
                    event = decode_event_frozen(message.value() or b"").event
                    if event["seq"] < len(head):
                        continue
                    tail.append(event)
                    values.append(reusable_value(message.value()))
                    request_ids.append(header(message.headers(), HEADER_REQUEST))
                    if len(head) + len(tail) == stub.length:
                        break
    except PartitionReadError as exc:
        raise _doubt(f"reloading session {session_id!r}: {exc}") from None
    events = head + tail
    if len(events) != stub.length or any(e["seq"] != i for i, e in enumerate(events)):
        raise _doubt(
            f"reloading session {session_id!r}: found {len(events)} contiguous events of "
            f"{stub.length}"
        )
    # A log that does not rebuild raises its SessionError: the same log, read again by a
    # restore of the partition, would not rebuild either (the session is broken).
    session = rebuild(session_id, events, interpreters, invariants is not False)
    requests.update(requests_from_log(request_ids, len(head)))
    state = SessionState(
        session,
        requests,
        {},
        len(tail),
        [*([None] * len(head)), *values],
        snapshot_from=stub.snapshot_from,
        snapshot_last=stub.snapshot_last,
        events_from=stub.events_from,
        oversized=stub.oversized,
    )
    metrics.RELOADS.labels("snapshot" if not tail else "events").inc()
    metrics.RELOAD_SECONDS.observe(time.monotonic() - started)
    return state
