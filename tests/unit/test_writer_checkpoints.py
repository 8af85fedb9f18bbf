"""Checkpoints (producers/writer/snapshots.py) with a session too large to snapshot: they go on
being written, and name that session with where its events start, so a restore reads its
events from there (producers/writer/restore.py). Restoring from real topics:
tests/integration/test_writer_roundtrip.py."""

from __future__ import annotations

from producers.writer.residency import Budget
from producers.writer.restore import checkpoint_mark
from producers.writer.snapshots import Snapshots
from producers.writer.state import PartitionState
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
