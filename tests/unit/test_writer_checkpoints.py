"""Checkpoints (producers/writer/snapshots.py) with a session too large to snapshot: they go on
being written, and name that session with where its events start, so a restore reads its
events from there (producers/writer/restore.py). Restoring from real topics:
tests/integration/test_writer_roundtrip.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import producers.writer.snapshots as snapshots_module
from dsh.errors import SessionError
from producers.writer.reload import _doubt
from producers.writer.residency import Budget, Evicted
from producers.writer.restore import MAX_UNSNAPSHOTTED, checkpoint_mark, checkpoint_state
from producers.writer.snapshots import Snapshots
from producers.writer.state import Checkpoint, PartitionState, SessionState, new_session
from schemas import WriterSnapshot
from tests.support.builders import user
from tests.support.outbox import SnapshotOutbox as Outbox

EVERY = 4
BIG = "big"


class Partition:
    """A partition whose events topic grows by one offset per event."""

    def __init__(self, max_snapshot_bytes: int = 4_000) -> None:
        self.state = PartitionState(0)
        self.end = 0
        self.snapshots = Snapshots(
            "snapshots",
            snapshot_every=0,
            checkpoint_every=EVERY,
            max_snapshot_bytes=max_snapshot_bytes,
            events_end=lambda p: self.end,
        )

    def append(self, sid: str, text: str = "x") -> None:
        """One command of one event, in a batch of its own."""
        state = self.state
        held = state.session(sid)
        held.session.append("user/message", user(text), surface_op="append")
        self.end += 1
        state.residency.grew(sid, len(text))
        held.events_since_snapshot += 1
        state.dirty.add(sid)
        state.events_since_checkpoint += 1

    def batch(self) -> Outbox:
        outbox = Outbox()
        self.snapshots.after_batch(self.state, outbox)
        return outbox


def test_a_session_too_large_to_snapshot_does_not_stop_the_partitions_checkpoints() -> None:
    p = Partition()
    p.append("small-0")
    p.batch()
    p.state.events_mark = p.end  # as a restore here would have it: new sessions start after
    p.append(BIG, "b" * 5_000)  # at events offset 1, its snapshot over the limit for good
    big_from = p.state.sessions[BIG].events_from
    assert big_from == 1
    written: list[WriterSnapshot] = []
    for i in range(2 * EVERY):
        p.append(f"small-{i % 3}")
        written += p.batch().checkpoints()
    assert len(written) == 2
    assert p.state.sessions[BIG].oversized and BIG in p.state.dirty
    mark = checkpoint_mark(written[-1])
    assert mark.covered == 8  # the partition's end when the second one was taken
    assert mark.unsnapshotted == {BIG.encode(): big_from} and mark.start == big_from
    # Below the covered offset only the big session's records are read.
    assert mark.skips(big_from, b"small-1") and not mark.skips(big_from, BIG.encode())
    assert not mark.skips(8, b"small-1")


def test_an_evicted_session_too_large_to_snapshot_is_named_by_its_stub() -> None:
    p = Partition()
    p.state.residency.budget = Budget(sessions=1)
    p.append(BIG, "b" * 5_000)
    p.batch()
    p.append("small")  # the big one, least recently used, leaves to its events
    p.batch()
    assert BIG not in p.state.sessions
    stub = p.state.residency.stub(BIG)
    assert stub is not None and stub.events_from == 0
    written: list[WriterSnapshot] = []
    for _ in range(2 * EVERY):
        p.append("small")
        written += p.batch().checkpoints()
    assert written
    assert checkpoint_mark(written[-1]).unsnapshotted == {BIG.encode(): 0}


def test_without_a_session_too_large_the_checkpoint_is_as_before() -> None:
    p = Partition()
    written: list[WriterSnapshot] = []
    for i in range(EVERY):
        p.append(f"small-{i}")
        written += p.batch().checkpoints()
    (checkpoint,) = written
    assert checkpoint.state == {"eventsOffset": EVERY}


def test_a_checkpoint_naming_too_many_sessions_says_only_where_to_read_from() -> None:
    """A restore past its budget evicts sessions no snapshot covers, all of a partition's
    after a fallback to the events topic: named one by one they would outgrow the record.
    The earliest of their offsets alone is as sound, skipping nothing below it."""
    few = Checkpoint(500, [], {"a": 40, "b": 70})
    assert checkpoint_mark(WriterSnapshot("c", (), state=checkpoint_state(few))).unsnapshotted
    froms = {f"s{i}": 100 + i for i in range(MAX_UNSNAPSHOTTED + 1)}
    state = checkpoint_state(Checkpoint(500, [], froms))
    assert state == {"eventsOffset": 100}
    mark = checkpoint_mark(WriterSnapshot("c", (), state=state))
    assert not mark.skips(100, b"anyone") and mark.start == 100


def _evicted_dirty(
    p: Partition, count: int, prefix: str = "quiet", reload: Callable[[str], None] | None = None
) -> tuple[list[str], list[str]]:
    """``count`` sessions of one event each, evicted by a restore with that event no snapshot
    covers (at events offsets 0, 1, ...); the sessions reloaded since, in order. ``reload``
    runs first at each reload (to raise, to move a clock)."""
    state = p.state
    sids = [f"{prefix}-{i}" for i in range(count)]
    logs: dict[str, SessionState] = {}
    for i, sid in enumerate(sids):
        held = SessionState(new_session(sid, {}))
        held.session.append("user/message", user(sid), surface_op="append")
        logs[sid] = held
        state.residency.drop(sid, Evicted(1, True, None, -1, i, 50))
        state.dirty.add(sid)
    p.end = max(p.end, count)
    state.checkpoint_owed = True
    taken: list[str] = []

    def reload_one(sid: str, stub: Evicted) -> SessionState:
        if reload is not None:
            reload(sid)
        taken.append(sid)
        return logs[sid]

    state.residency.reload = reload_one
    return sids, taken


def _idle(snapshots: Snapshots, *partitions: Partition) -> Outbox:
    """One idle transaction over the partitions that owe a checkpoint, as Writer._idle runs
    it, committed."""
    due = [p.state for p in partitions if snapshots.owes_checkpoint(p.state)]
    outbox = Outbox()
    snapshots.take_out_owed(due)  # every read before anything is produced
    for state in due:
        snapshots.when_idle(state, outbox)
    snapshots.release_taken()
    for state in due:
        state.residency.committed()
    return outbox


def test_sessions_a_restore_evicted_dirty_are_snapshotted_a_few_per_transaction() -> None:
    """Sessions evicted by a restore with events no snapshot covers: the checkpoint an idle
    partition owes takes them out a few per transaction, snapshots them, evicts them again
    clean and never resident, and names none of them."""
    p = Partition()
    state = p.state
    sids, taken = _evicted_dirty(p, snapshots_module.TAKEN_OUT_PER_TRANSACTION + 2)
    assert p.snapshots.owes_checkpoint(state)
    first = _idle(p.snapshots, p)
    assert len(taken) == snapshots_module.TAKEN_OUT_PER_TRANSACTION and not first.checkpoints()
    second = _idle(p.snapshots, p)
    assert sorted(taken) == sorted(sids) and not state.sessions and not state.dirty
    (checkpoint,) = second.checkpoints()
    assert checkpoint.state == {"eventsOffset": len(sids)}
    assert not p.snapshots.owes_checkpoint(state)
    for sid in sids:
        stub = state.residency.evicted[sid]
        assert stub.snapshot_last == 0 and stub.length == 1


def test_one_idle_transaction_takes_out_that_many_sessions_across_its_partitions() -> None:
    """The take-out limit is the transaction's, not each partition's checkpoint's."""
    limit = snapshots_module.TAKEN_OUT_PER_TRANSACTION
    p0, p1 = Partition(), Partition()
    p1.state = PartitionState(1)
    shared = p0.snapshots
    _, taken0 = _evicted_dirty(p0, limit, "a")
    _, taken1 = _evicted_dirty(p1, limit, "b")
    outbox = _idle(shared, p0, p1)
    assert len(taken0) + len(taken1) == limit
    # The first partition's sessions all taken out: its checkpoint alone is written.
    assert [c.session_id for c in outbox.checkpoints()] == ["checkpoint/0"]
    # The sessions not reached are evicted as they were, still named.
    assert all(sid in p1.state.residency.evicted for sid in p1.state.dirty)
    _idle(shared, p0, p1)
    assert len(taken0) + len(taken1) == 2 * limit
    assert not p0.state.dirty and not p1.state.dirty


def test_take_outs_stop_a_while_after_the_transactions_first() -> None:
    """Each take-out is a read of the topics with no poll: none once ``take_out_seconds``
    have passed since the transaction's first."""
    now = [0.0]

    def slow(sid: str) -> None:
        now[0] += 0.6

    p = Partition()
    p.snapshots = Snapshots(
        "snapshots",
        snapshot_every=0,
        checkpoint_every=EVERY,
        max_snapshot_bytes=4_000,
        events_end=lambda _: p.end,
        take_out_seconds=1.0,
        clock=lambda: now[0],
    )
    _, taken = _evicted_dirty(p, 4, reload=slow)
    _idle(p.snapshots, p)
    assert len(taken) == 2  # at 0 and 0.6 s; not at 1.2 s


def test_a_command_batch_never_takes_a_session_out_and_names_it() -> None:
    """A command batch's checkpoint (by ``checkpoint_every``, or one an idle transaction
    started) never waits behind a reload: it names the session by its stub, and the partition
    still owes the checkpoint that snapshots it."""
    limit = snapshots_module.TAKEN_OUT_PER_TRANSACTION
    p = Partition()
    sids, taken = _evicted_dirty(p, limit + 1)
    _idle(p.snapshots, p)  # takes out all but the last
    assert len(taken) == limit and p.state.checkpoint is not None
    p.append("active")
    (checkpoint,) = p.batch().checkpoints()
    assert len(taken) == limit
    assert checkpoint_mark(checkpoint).unsnapshotted == {sids[-1].encode(): limit}
    assert p.snapshots.owes_checkpoint(p.state)
    for _ in range(EVERY):  # a checkpoint by checkpoint_every
        p.append("active")
        p.batch()
    assert len(taken) == limit and sids[-1] in p.state.dirty
    _idle(p.snapshots, p)
    assert taken[-1] == sids[-1] and sids[-1] not in p.state.dirty
    assert not p.snapshots.owes_checkpoint(p.state)


def test_a_reload_that_fails_leaves_the_session_named() -> None:
    """A read failure (the reload's doubt) neither fails the transaction nor loses the stub:
    the session is named, and no other is read in that transaction."""
    attempts: list[str] = []

    def fail(sid: str) -> None:
        attempts.append(sid)
        raise _doubt(f"reloading session {sid!r}: timed out")

    p = Partition()
    sids, taken = _evicted_dirty(p, 2, reload=fail)
    assert not _idle(p.snapshots, p).checkpoints() and attempts == sids[:1]
    (checkpoint,) = _idle(p.snapshots, p).checkpoints()
    assert attempts == sids
    assert checkpoint_mark(checkpoint).unsnapshotted == {
        sid.encode(): i for i, sid in enumerate(sids)
    }
    assert all(sid in p.state.residency.evicted for sid in sids) and not taken
    assert not p.state.broken and not p.snapshots.owes_checkpoint(p.state)


def test_a_session_found_broken_is_named_and_checkpoints_go_on() -> None:
    """A session whose log does not rebuild is broken; its stub names it, as a restore would
    find it broken again from there, and later checkpoints go on without reading it again."""
    attempts: list[str] = []

    def broken(sid: str) -> None:
        attempts.append(sid)
        if sid == "quiet-0":
            raise SessionError("does not rebuild")

    p = Partition()
    _, taken = _evicted_dirty(p, 2, reload=broken)
    (checkpoint,) = _idle(p.snapshots, p).checkpoints()
    assert "quiet-0" in p.state.broken and taken == ["quiet-1"]
    assert checkpoint_mark(checkpoint).unsnapshotted == {b"quiet-0": 0}
    assert p.state.residency.evicted["quiet-0"].events_from == 0
    written = []
    for _ in range(EVERY):
        p.append("active")
        written += p.batch().checkpoints()
    p.state.checkpoint_owed = True
    written += _idle(p.snapshots, p).checkpoints()
    assert len(written) == 2 and attempts == ["quiet-0", "quiet-1"]
    assert all(checkpoint_mark(w).unsnapshotted == {b"quiet-0": 0} for w in written)


def test_a_session_a_command_found_broken_when_reloaded_is_named_too() -> None:
    def broken(sid: str) -> None:
        raise SessionError("does not rebuild")

    p = Partition()
    _evicted_dirty(p, 1, reload=broken)
    p.state.checkpoint_owed = False
    with pytest.raises(SessionError):
        p.state.held("quiet-0")
    assert "quiet-0" in p.state.broken_on_reload
    written = []
    for _ in range(EVERY):
        p.append("active")
        written += p.batch().checkpoints()
    (checkpoint,) = written
    assert checkpoint_mark(checkpoint).unsnapshotted == {b"quiet-0": 0}


def test_a_broken_session_with_nothing_to_name_still_stops_checkpoints() -> None:
    p = Partition()
    p.state.broken["gone"] = SessionError("does not rebuild")  # broken by a restore: no stub
    for _ in range(EVERY):
        p.append("active")
        assert not p.batch().checkpoints()
    p.state.checkpoint_owed = True
    assert not p.snapshots.owes_checkpoint(p.state)


def test_sessions_taken_out_but_not_snapshotted_are_evicted_again_as_they_were() -> None:
    p = Partition()
    sids, taken = _evicted_dirty(p, 2)
    stubs = dict(p.state.residency.evicted)
    p.snapshots.take_out_owed([p.state])
    assert taken == sids and not p.state.residency.evicted
    p.snapshots.release_taken()  # the transaction failed before its checkpoints
    assert p.state.residency.evicted == stubs and p.state.dirty == set(sids)


def test_a_session_a_command_batch_named_midway_keeps_the_checkpoint_owed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle transaction starts a checkpoint and takes out what it may; a command batch
    goes on with it and names the rest (it never takes out), its bytes budget spent before
    the end; the idle transaction that finishes it leaves the partition owing one, and the
    next snapshots the sessions the batch named."""
    monkeypatch.setattr(snapshots_module, "CHECKPOINT_BYTES_PER_BATCH", 1)
    limit = snapshots_module.TAKEN_OUT_PER_TRANSACTION
    p = Partition()
    sids, taken = _evicted_dirty(p, limit + 2)
    p.append("z-0")
    p.append("z-1")  # resident and dirty: last in the checkpoint's order
    _idle(p.snapshots, p)
    assert taken == sids[:limit] and p.state.checkpoint is not None
    assert not p.batch().checkpoints()  # names the last two, snapshots z-0, out of budget
    p.state.residency.committed()
    (finished,) = _idle(p.snapshots, p).checkpoints()
    assert checkpoint_mark(finished).unsnapshotted == {
        sid.encode(): i for i, sid in enumerate(sids) if i >= limit
    }
    assert p.snapshots.owes_checkpoint(p.state)
    (last,) = _idle(p.snapshots, p).checkpoints()
    assert taken == sids and not checkpoint_mark(last).unsnapshotted
    assert not p.state.dirty and not p.snapshots.owes_checkpoint(p.state)


class _FailingOutbox(Outbox):
    def put(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("produce failed")


def test_a_session_taken_out_whose_snapshot_fails_to_produce_stays_evicted() -> None:
    p = Partition()
    sids, taken = _evicted_dirty(p, 1)
    stubs = dict(p.state.residency.evicted)
    p.snapshots.take_out_owed([p.state])
    assert taken == sids
    with pytest.raises(RuntimeError, match="produce failed"):
        p.snapshots.when_idle(p.state, _FailingOutbox())
    p.snapshots.release_taken()
    assert p.state.residency.evicted == stubs and p.state.dirty == set(sids)
    assert not p.state.sessions and not p.state.residency.leaving
