"""Reading a partition of the events and snapshots topics back into writer state.

Reads are ``read_committed`` and go on until the position reaches the *high watermark* read at
the start (not the last stable offset): a transaction that a dead or paused owner left open
holds the position below it until that transaction commits or is aborted, so a new owner
never serves from a log that may still grow behind its back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Message

from dsh.errors import SessionError
from dsh.projections import Interpreter
from producers.writer.rejections import DEFAULT_SLOTS, Rejections, Slot, is_slot_key
from producers.writer.residency import Budget, Evicted
from producers.writer.state import (
    Checkpoint,
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
    snapshot_head,
)
from servicekit.partition_reader import high_watermark, read_partitions

CHECKPOINT_KEY = b"\x00checkpoint"
# Most sessions a checkpoint names with where their events start (about 100 bytes each).
MAX_UNSNAPSHOTTED = 1000


@dataclass(frozen=True)
class CheckpointMark:
    """A checkpoint as a restore reads it: the events topic is read from ``start``; below
    ``covered``, snapshots cover every session's events but those of ``unsnapshotted``
    (session id key -> an events offset at or before its first event no snapshot covers)."""

    start: int
    covered: int
    unsnapshotted: dict[bytes, int]

    def skips(self, offset: int, key: bytes | None) -> bool:
        """Whether the events record at ``offset`` with ``key`` is covered by a snapshot."""
        if offset >= self.covered:
            return False
        since = self.unsnapshotted.get(key or b"")
        return since is None or offset < since


def checkpoint_state(checkpoint: Checkpoint) -> dict[str, Any]:
    """The checkpoint record's state. ``eventsOffset`` alone is a sound place to read the
    whole partition from (a reader that knows no more skips by its snapshots' last seqs); the
    sessions too large to snapshot let one that does skip the other sessions' records."""
    froms = checkpoint.unsnapshotted
    if not froms:
        return {"eventsOffset": checkpoint.offset}
    events_offset = min(checkpoint.offset, *froms.values())
    if len(froms) > MAX_UNSNAPSHOTTED:
        # Sessions evicted by a restore before any snapshot covered them can be a whole
        # partition's: named one by one they would outgrow the record.
        return {"eventsOffset": events_offset}
    return {
        "eventsOffset": events_offset,
        "coveredOffset": checkpoint.offset,
        "unsnapshotted": dict(sorted(froms.items())),
    }


def checkpoint_mark(snapshot: WriterSnapshot) -> CheckpointMark:
    state = snapshot.state if isinstance(snapshot.state, dict) else {}
    start = int(state.get("eventsOffset", 0))
    froms = state.get("unsnapshotted") or {}
    return CheckpointMark(
        start,
        int(state.get("coveredOffset", start)),
        {sid.encode(): int(offset) for sid, offset in froms.items()},
    )


def snapshot_bare(snapshot: WriterSnapshot) -> bool:
    """Whether the snapshot's session was created with invariants off."""
    return isinstance(snapshot.state, dict) and snapshot.state.get("invariants") is False


@dataclass(slots=True)
class _Head:
    """A session's latest snapshot as far as the read has got: its offset, size and last seq,
    and its value while it is among the most recent ones the budget holds (else None)."""

    offset: int
    size: int
    last_seq: int
    value: bytes | None


class _Heads:
    """The latest snapshot of each session of a partition, read in offset order. Only the
    values of the most recent ones that fit ``budget`` are held: a later snapshot means a
    session used more recently, and those are the ones kept in memory after the restore.
    The others are known only by where they are, which is what an eviction's stub holds."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.of: dict[str, _Head] = {}
        self._held: OrderedDict[str, int] = OrderedDict()  # session -> size, oldest first
        self._held_bytes = 0

    def add(self, offset: int, value: bytes) -> None:
        session_id, last_seq = snapshot_head(value)
        held = self._held.pop(session_id, None)
        if held is not None:
            self._held_bytes -= held
        self.of[session_id] = _Head(offset, len(value), last_seq, value)
        self._held[session_id] = len(value)
        self._held_bytes += len(value)
        while len(self._held) > 1 and self.budget.exceeded_by(len(self._held), self._held_bytes):
            oldest, size = self._held.popitem(last=False)
            self._held_bytes -= size
            self.of[oldest].value = None

    def held(self) -> list[str]:
        """Sessions whose values are held, oldest snapshot first."""
        return list(self._held)


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
    budget: Budget | None = None,
    _slots: list[Slot] | None = None,
) -> PartitionState:
    """Sessions of the partition from their latest snapshots plus the events after the last
    checkpoint. A checkpoint at events offset X promises that every session with an event
    below X has a snapshot covering those events, so the events topic is read from X only;
    but for the sessions it names as too large to snapshot, whose events are read from where
    it says they start (the other sessions' records before X are skipped undecoded).
    The remembered rejections come from the same topic (``producers.writer.rejections``).

    With a ``budget`` (the partition's share of the writer's), the restore builds only the
    sessions it keeps: those with events after their snapshot, the most recently used that
    fit, then the most recently snapshotted ones that fit. Every
    other session becomes an :class:`Evicted` stub at once, its snapshot never decoded, so
    taking a partition over costs the budget, not the partition's whole history. Sessions
    with events after their snapshot past the budget (all of them, when the events topic alone
    is read) are evicted too, to their snapshot and those events: they stay dirty, and the
    partition owes a checkpoint, which the writer writes as soon as it is idle, taking them
    out of the topics a few per idle transaction to snapshot them (:mod:`.snapshots`); until
    then, a checkpoint names where their events start, as for a session too large to
    snapshot."""
    events_topic, snapshots_topic = topics
    heads = _Heads(budget or Budget())
    snapshots_end = 0
    slots: list[Slot] = [] if _slots is None else _slots
    start = 0
    mark = CheckpointMark(0, 0, {})
    if use_snapshots:
        end = high_watermark(probe, snapshots_topic, partition)
        checkpoint: Message | None = None
        ranges: dict[int, tuple[int | None, int | None]] = {partition: (None, end)}
        for message in read_partitions(reader, snapshots_topic, ranges, timeout_s):
            key = message.key()
            if key == CHECKPOINT_KEY:
                checkpoint = message
            elif is_slot_key(key):
                slots.append(Slot.from_state(decode_snapshot(message.value() or b"").state))
            else:
                heads.add(message.offset() or 0, message.value() or b"")
        if checkpoint is not None:
            mark = checkpoint_mark(decode_snapshot(checkpoint.value() or b""))
            start = mark.start
        snapshots_end = end
    end = high_watermark(probe, events_topic, partition)
    logs: dict[str, list[dict[str, Any]]] = {}
    values: dict[str, list[bytes | None]] = {}
    request_ids: dict[str, list[str | None]] = {}
    tail_bytes: dict[str, int] = {}
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
    last_at: dict[str, int] = {}  # session id -> offset of its last event: its last use
    ranges = {partition: (start or None, end)}  # from its first offset unless checkpointed
    for message in read_partitions(reader, events_topic, ranges, timeout_s):
        if mark.skips(message.offset() or 0, message.key()):
            continue
        try:
            record = decode_event_frozen(message.value() or b"")
        except SessionError as exc:
            state.broken[(message.key() or b"").decode(errors="replace")] = without_traceback(exc)
            continue
        sid = record.session_id
        covered = heads.of.get(sid)
        if covered is not None and record.event["seq"] <= covered.last_seq:
            continue  # already in the snapshot
        if record.event["seq"] == 0 and created_bare(message.headers()):
            bare.add(sid)
        if sid not in logs:
            tail_at[sid] = message.offset() or 0
        last_at[sid] = message.offset() or 0
        logs.setdefault(sid, []).append(record.event)
        values.setdefault(sid, []).append(reusable_value(message.value()))
        tail_bytes[sid] = tail_bytes.get(sid, 0) + len(message.value() or b"")
        request_ids.setdefault(sid, []).append(header(message.headers(), HEADER_REQUEST))
    for sid, tail in logs.items():
        head = heads.of.get(sid)
        if use_snapshots and sid not in state.broken and tail[0]["seq"] != _length(head):
            # A gap between snapshot and tail breaks the checkpoint's promise: trust only the
            # events topic, from its beginning.
            return _from_events_only(
                reader, probe, topics, partition, timeout_s, interpreters, rejection_slots, slots,
                budget,
            )  # fmt: skip
    tails = _tails_kept(budget or Budget(), logs, last_at, tail_bytes, heads)
    answered_tails: dict[str, set[str]] = {}
    kept_tails = set(tails)  # a list, in build order: too slow to ask per session
    for sid in [sid for sid in logs if sid not in kept_tails]:
        head = heads.of.get(sid)
        stub = Evicted(
            _length(head) + len(logs[sid]),
            None if head is not None else sid not in bare,  # None: as its snapshot says
            head.offset if head is not None else None,
            head.last_seq if head is not None else -1,
            tail_at[sid],
            (head.size if head is not None else 0) + tail_bytes[sid],
        )
        state.residency.drop(sid, stub)
        state.dirty.add(sid)  # no snapshot covers its tail: the next checkpoint names it
        state.checkpoint_owed = True  # or snapshots it, taken out (producers/writer/snapshots.py)
        answered_tails[sid] = {rid for rid in request_ids.pop(sid) if rid is not None}
        del logs[sid], values[sid]
    # Built, oldest use first: held snapshots by their offset, then sessions with a tail.
    # Not those whose tail was evicted just above: built from the snapshot alone, they would
    # lack the tail's events (and be resident beside their stub).
    evicted = state.residency.evicted
    kept = [sid for sid in heads.held() if sid not in logs and sid not in evicted] + tails
    missing = {heads.of[sid].offset: sid for sid in logs if _unheld(heads.of.get(sid))}
    if missing and not _fetch(reader, snapshots_topic, partition, timeout_s, heads, missing):
        return _from_events_only(
            reader, probe, topics, partition, timeout_s, interpreters, rejection_slots, slots,
            budget,
        )  # fmt: skip
    for sid in kept:
        if sid in state.broken:
            continue
        found = heads.of.get(sid)
        latest = decode_snapshot(found.value) if found is not None and found.value else None
        head_events = list(latest.events) if latest is not None else []
        tail = logs.get(sid, [])
        invariants = sid not in bare and (latest is None or not snapshot_bare(latest))
        try:
            session = rebuild(sid, head_events + tail, interpreters, invariants)
        except SessionError as exc:
            state.broken[sid] = without_traceback(exc)
            continue
        requests = (
            {r.request_id: (r.first_seq, r.count) for r in latest.requests}
            if latest is not None
            else {}
        )
        requests.update(requests_from_log(request_ids.get(sid, []), len(head_events)))
        known: list[bytes | None] = [None] * len(head_events)
        known += values.get(sid, [])
        state.sessions[sid] = SessionState(
            session,
            requests,
            {},
            len(tail),
            known,
            snapshot_from=found.offset if found is not None else None,
            snapshot_last=len(head_events) - 1,
            events_from=tail_at.get(sid, end),
        )
        state.residency.used(sid)
        state.residency.grew(sid, (found.size if found is not None else 0) + tail_bytes.get(sid, 0))
        if tail:
            state.dirty.add(sid)  # the next checkpoint must cover its tail
    for sid, found in heads.of.items():
        if (
            sid in state.sessions
            or sid in state.broken
            or sid in state.residency.evicted  # with its tail
            or found.last_seq < 0
        ):
            continue
        # Its snapshot holds all of it; whether it is bare, the snapshot says when reloaded.
        stub = Evicted(found.last_seq + 1, None, found.offset, found.last_seq, end, found.size)
        state.residency.drop(sid, stub)
    answered: dict[str, Iterable[str]] = {sid: s.requests for sid, s in state.sessions.items()}
    answered |= answered_tails
    state.rejections.load(slots, answered)
    return state


def _tails_kept(
    budget: Budget,
    logs: Mapping[str, list[dict[str, Any]]],
    last_at: Mapping[str, int],
    tail_bytes: Mapping[str, int],
    heads: _Heads,
) -> list[str]:
    """The sessions with a tail that the restore builds, oldest use first: the most recently
    used that fit ``budget`` (always one), and any whose tail is not contiguous, which a
    rebuild finds broken (evicted, it would be doubted at every reload instead)."""
    if not budget.bounded:
        return list(logs)
    kept: list[str] = []
    size = 0
    for sid in sorted(logs, key=last_at.__getitem__, reverse=True):
        tail = logs[sid]
        head = heads.of.get(sid)
        grown = size + tail_bytes[sid] + (head.size if head is not None else 0)
        fits = not kept or not budget.exceeded_by(len(kept) + 1, grown)
        first = tail[0]["seq"]
        if fits or any(e["seq"] != first + i for i, e in enumerate(tail)):
            kept.append(sid)
            size = grown
    kept.reverse()
    return kept


def _length(head: _Head | None) -> int:
    return head.last_seq + 1 if head is not None else 0


def _unheld(head: _Head | None) -> bool:
    return head is not None and head.value is None


def _fetch(
    reader: Consumer,
    snapshots_topic: str,
    partition: int,
    timeout_s: float,
    heads: _Heads,
    missing: dict[int, str],
) -> bool:
    """Read again the snapshots (offset -> session) whose values were let go of: sessions with
    events after an older snapshot. False if one is not where it was."""
    ranges: dict[int, tuple[int | None, int | None]] = {partition: (min(missing), max(missing) + 1)}
    for message in read_partitions(reader, snapshots_topic, ranges, timeout_s):
        sid = missing.pop(message.offset() or 0, None)
        if sid is not None and message.key() == sid.encode():
            heads.of[sid].value = message.value()
    return not missing


def _from_events_only(
    reader: Consumer,
    probe: Consumer,
    topics: tuple[str, str],
    partition: int,
    timeout_s: float,
    interpreters: Mapping[str, Interpreter],
    rejection_slots: int,
    slots: list[Slot],
    budget: Budget | None,
) -> PartitionState:
    return restore_partition(
        reader,
        probe,
        topics,
        partition,
        timeout_s,
        interpreters=interpreters,
        use_snapshots=False,
        rejection_slots=rejection_slots,
        budget=budget,
        _slots=slots,
    )
