"""Reading a partition of the events and snapshots topics back into writer state.

Reads are ``read_committed`` and go on until the position reaches the *high watermark* read at
the start (not the last stable offset): a transaction that a dead or paused owner left open
holds the position below it until that transaction commits or is aborted, so a new owner
never serves from a log that may still grow behind its back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Message

from dsh.errors import SessionError
from dsh.projections import Interpreter
from producers.writer.rejections import DEFAULT_SLOTS, Rejections, Slot, is_slot_key
from producers.writer.state import (
    PartitionState,
    SessionState,
    rebuild,
    requests_from_log,
    reusable_value,
    without_traceback,
)
from schemas import (
    HEADER_REQUEST,
    WriterSnapshot,
    created_bare,
    decode_event_frozen,
    decode_snapshot,
    header,
)
from servicekit.partition_reader import high_watermark, read_partitions

CHECKPOINT_KEY = b"\x00checkpoint"


def checkpoint_offset(snapshot: WriterSnapshot) -> int:
    state = snapshot.state if isinstance(snapshot.state, dict) else {}
    return int(state.get("eventsOffset", 0))


def _bare(snapshot: WriterSnapshot) -> bool:
    """Whether the snapshot's session was created with invariants off."""
    return isinstance(snapshot.state, dict) and snapshot.state.get("invariants") is False


def restore_partition(
    reader: Consumer,
    probe: Consumer,
    topics: tuple[str, str],
    partition: int,
    timeout_s: float,
    *,
    interpreters: Mapping[str, Interpreter] | None = None,
    use_snapshots: bool = True,
    rejection_slots: int = DEFAULT_SLOTS,
    _slots: list[Slot] | None = None,
) -> PartitionState:
    """Sessions of the partition from their latest snapshots plus the events after the last
    checkpoint. A checkpoint at events offset X promises that every session with an event
    below X has a snapshot covering those events, so the events topic is read from X only.
    The remembered rejections come from the same topic (``producers.writer.rejections``)."""
    events_topic, snapshots_topic = topics
    snapshots: dict[str, WriterSnapshot] = {}
    sizes: dict[str, int] = {}  # logged bytes of each session, as read
    snapshots_end = 0
    slots: list[Slot] = [] if _slots is None else _slots
    start = 0
    if use_snapshots:
        end = high_watermark(probe, snapshots_topic, partition)
        # Until compaction gets to them (not before their segment rolls), every snapshot a
        # session ever had is still there, each holding all its events up to then: only the
        # last record of each key is decoded, or a restore would decode a session's events
        # once per snapshot of it.
        last_of_key: dict[bytes | None, Message] = {}
        snapshot_at: dict[str, int] = {}  # session id -> offset of its latest snapshot
        ranges: dict[int, tuple[int | None, int | None]] = {partition: (None, end)}
        for message in read_partitions(reader, snapshots_topic, ranges, timeout_s):
            if is_slot_key(message.key()):
                slots.append(Slot.from_state(decode_snapshot(message.value() or b"").state))
            else:
                last_of_key[message.key()] = message
        checkpoint = last_of_key.pop(CHECKPOINT_KEY, None)
        if checkpoint is not None:
            start = checkpoint_offset(decode_snapshot(checkpoint.value() or b""))
        for message in last_of_key.values():
            snapshot = decode_snapshot(message.value() or b"")
            snapshots[snapshot.session_id] = snapshot
            snapshot_at[snapshot.session_id] = message.offset() or 0
            sizes[snapshot.session_id] = len(message.value() or b"")
        snapshots_end = end
    end = high_watermark(probe, events_topic, partition)
    logs: dict[str, list[dict[str, Any]]] = {}
    values: dict[str, list[bytes | None]] = {}
    request_ids: dict[str, list[str | None]] = {}
    bare: set[str] = set()  # sessions created with invariants off
    interpreters = interpreters or {}
    state = PartitionState(
        partition,
        interpreters,
        restored_from=start,
        rejections=Rejections(rejection_slots),
        snapshots_mark=snapshots_end,
        events_mark=end,
    )
    tail_at: dict[str, int] = {}  # session id -> offset of its first event after its snapshot
    ranges = {partition: (start or None, end)}  # from its first offset unless checkpointed
    for message in read_partitions(reader, events_topic, ranges, timeout_s):
        try:
            record = decode_event_frozen(message.value() or b"")
        except SessionError as exc:
            key = (message.key() or b"").decode(errors="replace")
            state.broken[key] = without_traceback(exc)
            continue
        covered = snapshots.get(record.session_id)
        if covered is not None and record.event["seq"] <= covered.last_seq:
            continue  # already in the snapshot
        if record.event["seq"] == 0 and created_bare(message.headers()):
            bare.add(record.session_id)
        if record.session_id not in logs:
            tail_at[record.session_id] = message.offset() or 0
        logs.setdefault(record.session_id, []).append(record.event)
        values.setdefault(record.session_id, []).append(reusable_value(message.value()))
        sizes[record.session_id] = sizes.get(record.session_id, 0) + len(message.value() or b"")
        request_ids.setdefault(record.session_id, []).append(
            header(message.headers(), HEADER_REQUEST)
        )
    for session_id in snapshots.keys() | logs.keys():
        if session_id in state.broken:
            continue
        latest = snapshots.get(session_id)
        head = list(latest.events) if latest is not None else []
        tail = logs.get(session_id, [])
        if use_snapshots and tail and tail[0]["seq"] != len(head):
            # A gap between snapshot and tail breaks the checkpoint's promise: trust only the
            # events topic, from its beginning.
            return restore_partition(
                reader,
                probe,
                topics,
                partition,
                timeout_s,
                interpreters=interpreters,
                use_snapshots=False,
                rejection_slots=rejection_slots,
                _slots=slots,
            )
        invariants = session_id not in bare and (latest is None or not _bare(latest))
        try:
            session = rebuild(session_id, head + tail, interpreters, invariants)
        except SessionError as exc:
            state.broken[session_id] = without_traceback(exc)
            continue
        requests = (
            {r.request_id: (r.first_seq, r.count) for r in latest.requests}
            if latest is not None
            else {}
        )
        requests.update(requests_from_log(request_ids.get(session_id, []), len(head)))
        known: list[bytes | None] = [None] * len(head)
        known += values.get(session_id, [])
        state.sessions[session_id] = SessionState(
            session,
            requests,
            {},
            len(tail),
            known,
            snapshot_from=snapshot_at.get(session_id),
            snapshot_last=len(head) - 1,
            events_from=tail_at.get(session_id, end),
        )
        state.residency.used(session_id)
        state.residency.grew(session_id, sizes.get(session_id, 0))
        if tail:
            state.dirty.add(session_id)  # the next checkpoint must cover its tail
    state.rejections.load(slots, {sid: s.requests for sid, s in state.sessions.items()})
    return state
