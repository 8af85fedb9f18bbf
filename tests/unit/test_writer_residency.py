"""The eviction policy of the writer (producers/writer/residency.py): least recently used first,
within a budget of sessions and logged bytes, in step with the transactions; and what an
eviction leaves to restore the session from (producers/writer/snapshots.py). Restoring from
real topics: tests/integration/test_writer_residency.py."""

from __future__ import annotations

import pytest

import producers.writer.snapshots as snapshots_module
from dsh.errors import RestoreError
from producers.writer.ownership import evict_restored
from producers.writer.residency import Budget, Evicted, Residency
from producers.writer.snapshots import Snapshots
from producers.writer.state import PartitionState, SessionState, new_session
from schemas import decode_snapshot
from tests.support.builders import user
from tests.support.outbox import SnapshotOutbox as Outbox


def _residency(sessions: int = 0, size: int = 0) -> Residency:
    return Residency(Budget(sessions, size))


def test_the_least_recently_used_go_first_and_the_last_used_always_stays() -> None:
    r = _residency(sessions=2)
    for sid in ("a", "b", "c"):
        r.used(sid)
    r.used("a")  # a is now the most recent: b is the oldest
    assert [sid for sid, _ in r.victims()] == ["b"]
    assert not r.over()
    one = _residency(size=10)
    one.used("big")
    one.grew("big", 100)
    assert list(one.victims()) == []  # alone, it stays whatever its size


def test_a_byte_budget_evicts_until_the_rest_fits() -> None:
    r = _residency(size=100)
    for sid, size in (("a", 60), ("b", 30), ("c", 50)):
        r.used(sid)
        r.grew(sid, size)
    assert list(r.victims()) == [("a", 60)]
    assert r.resident_bytes == 80
    unbounded = _residency()
    unbounded.used("a")
    unbounded.grew("a", 1 << 40)
    assert not unbounded.over()


@pytest.mark.parametrize(
    ("budget", "partitions", "share"),
    [
        (Budget(10, 1000), 3, Budget(4, 334)),
        (Budget(2, 0), 4, Budget(1, 0)),
        (Budget(), 2, Budget()),
    ],
)
def test_each_partition_gets_an_even_share_of_the_budget(
    budget: Budget, partitions: int, share: Budget
) -> None:
    assert budget.share(partitions) == share


def _stub(length: int = 3) -> Evicted:
    return Evicted(length, True, 7, length - 1, 40, 500)


def test_an_evicted_session_leaves_memory_only_once_its_transaction_commits() -> None:
    reloads: list[str] = []
    held = SessionState(new_session("a", {}))

    def reload(sid: str, stub: Evicted) -> SessionState:
        reloads.append(sid)
        return held

    r = Residency(reload=reload)
    r.leave("a", held, _stub())
    r.stage()
    r.stage()  # a later transaction, evicting nothing
    assert "a" in r.leaving and "a" not in r.evicted
    r.committed()
    assert r.evicted == {"a": _stub()} and not r.leaving
    r.committed()
    assert r.take_back("a") is held and reloads == ["a"]
    assert r.resident_bytes == 500 and "a" not in r.evicted
    assert r.take_back("never-seen") is None


def test_a_session_asked_for_before_its_eviction_commits_comes_back_from_memory() -> None:
    held = SessionState(new_session("a", {}))
    r = Residency(reload=lambda sid, stub: pytest.fail("read from the topics"))
    r.leave("a", held, _stub())
    r.stage()
    assert r.take_back("a") is held
    r.committed()
    assert not r.evicted and not r.leaving


def test_a_session_evicted_again_before_its_first_eviction_commits_leaves_with_the_second() -> None:
    """Evicted in transaction N, taken back and evicted again in N+1: when N commits, the
    session is still leaving under N+1's snapshot, which a reload could not read until N+1
    commits; a command for it meanwhile comes back from memory."""
    first, second = SessionState(new_session("a", {})), SessionState(new_session("a", {}))
    r = Residency(reload=lambda sid, stub: pytest.fail("read from the topics"))
    r.leave("a", first, _stub(3))
    r.stage()  # N
    assert r.take_back("a") is first
    r.leave("a", second, _stub(5))
    r.stage()  # N + 1
    r.committed()  # N
    assert "a" not in r.evicted and r.leaving["a"] == (second, _stub(5))
    assert r.take_back("a") is second
    r.leave("a", second, _stub(5))
    r.stage()  # N + 2
    r.committed()  # N + 1: "a" was taken back since, and left again in N + 2
    assert "a" not in r.evicted
    r.committed()  # N + 2
    assert r.evicted == {"a": _stub(5)} and not r.leaving


def _partition(sessions: int) -> PartitionState:
    state = PartitionState(0, snapshots_mark=11, events_mark=22)
    state.residency.budget = Budget(sessions=sessions)
    return state


def _append(state: PartitionState, sid: str, count: int) -> SessionState:
    held = state.session(sid)
    for i in range(count):
        held.session.append("user/message", user(f"{sid}{i}"), surface_op="append")
    state.residency.grew(sid, 100 * count)
    state.dirty.add(sid)
    return held


def _snapshots(max_bytes: int = 1 << 20) -> Snapshots:
    return Snapshots("snapshots", snapshot_every=0, checkpoint_every=0,
                     max_snapshot_bytes=max_bytes, events_end=lambda p: 0,
                     snapshots_end=lambda p: 33)  # fmt: skip


def test_an_evicted_session_is_snapshotted_first_and_its_stub_points_at_that_snapshot() -> None:
    state = _partition(sessions=1)
    _append(state, "old", 3)
    _append(state, "new", 1)
    outbox = Outbox()
    _snapshots().after_batch(state, outbox)
    assert list(state.sessions) == ["new"]
    ((key, value),) = outbox.snapshots
    assert key == b"old" and decode_snapshot(value or b"").last_seq == 2
    stub = state.residency.leaving["old"][1]
    assert stub == Evicted(3, True, 33, 2, 22, 300)
    assert "old" not in state.dirty


def test_a_session_too_large_to_snapshot_is_evicted_to_its_events() -> None:
    state = _partition(sessions=1)
    _append(state, "old", 3)
    _append(state, "new", 1)
    outbox = Outbox()
    _snapshots(max_bytes=1).after_batch(state, outbox)
    assert outbox.snapshots == []
    assert state.residency.leaving["old"][1] == Evicted(3, True, None, -1, 22, 300, oversized=True)


def test_a_session_with_no_event_is_simply_forgotten() -> None:
    state = _partition(sessions=1)
    state.session("empty")  # a rejected first command leaves one
    _append(state, "new", 1)
    _snapshots().after_batch(state, Outbox())
    assert list(state.sessions) == ["new"]
    assert not state.residency.leaving and state.held("empty") is None


def test_after_a_restore_a_session_with_events_past_its_snapshot_stays_until_snapshotted() -> None:
    state = _partition(sessions=1)
    _append(state, "tail", 2)  # restored with events no snapshot covers: dirty
    _append(state, "clean", 1)
    state.dirty.discard("clean")
    _append(state, "newest", 1)
    state.dirty.discard("newest")
    evict_restored(state)
    # The budget holds one: the others go, but a checkpoint can only snapshot a resident one.
    assert set(state.sessions) == {"tail"}
    assert set(state.residency.evicted) == {"clean", "newest"}
    _append(state, "next", 1)  # a command: the batch snapshots "tail", then evicts it
    outbox = Outbox()
    _snapshots().after_batch(state, outbox)
    assert [key for key, _ in outbox.snapshots] == [b"tail"]
    assert "tail" in state.residency.leaving and "tail" not in state.dirty


def test_a_reload_whose_log_does_not_rebuild_marks_the_session_broken() -> None:
    def reload(sid: str, stub: Evicted) -> SessionState:
        raise RestoreError(f"{sid}: seq 3 follows seq 1", index=2)

    state = _partition(sessions=1)
    state.residency.reload = reload
    state.residency.drop("gone", _stub())
    with pytest.raises(RestoreError):
        state.held("gone")
    assert isinstance(state.broken["gone"], RestoreError)


def test_evictions_snapshot_a_bounded_amount_per_transaction_and_the_next_ones_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a restore every session past the budget may owe a snapshot: all in one
    transaction could overflow the producer's queue (and take far longer than one)."""
    monkeypatch.setattr(snapshots_module, "EVICTION_BYTES_PER_BATCH", 1)  # one a transaction
    state = _partition(sessions=1)
    for sid in ("a", "b", "c", "new"):
        _append(state, sid, 2)
    snapshots = _snapshots()
    evicted: list[list[bytes | None]] = []
    for _ in range(3):
        outbox = Outbox()
        snapshots.after_batch(state, outbox)
        evicted.append([key for key, _ in outbox.snapshots])
    assert evicted == [[b"a"], [b"b"], [b"c"]]
    assert list(state.sessions) == ["new"] and not state.residency.over()
