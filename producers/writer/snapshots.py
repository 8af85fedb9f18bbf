"""Snapshots and checkpoints: what lets a writer restore a partition from the snapshots topic
plus a tail of the events topic instead of the whole partition (:mod:`.restore`).

A session is snapshotted every ``snapshot_every`` of its events. Every ``checkpoint_every``
events of a partition, a checkpoint records an events offset X below which snapshots cover
everything but the sessions too large to snapshot, which it names with where their events
start: a restore reads the events topic from X on, and those sessions' events from earlier.
The batch's remembered rejections go to the same topic (:mod:`.rejections`). Everything here
goes into the open transaction through an :class:`~producers.writer.journal.Outbox`; no Kafka
client is involved.
"""

from __future__ import annotations

from collections.abc import Callable

from producers.writer import metrics
from producers.writer.journal import SNAPSHOT, Outbox
from producers.writer.restore import CHECKPOINT_KEY, checkpoint_state
from producers.writer.state import Checkpoint, PartitionState
from schemas import WriterSnapshot, encode_snapshot

# Snapshot bytes a checkpoint in progress may add to one transaction (at least one session's).
CHECKPOINT_BYTES_PER_BATCH = 1 << 20
# Snapshot bytes evictions may add to one transaction (at least one session's): after a
# restore, every session past the budget may owe one, and all in one transaction could be
# gigabytes; the rest stay in memory a few batches longer.
EVICTION_BYTES_PER_BATCH = 4 << 20


class Snapshots:
    def __init__(
        self,
        topic: str,
        *,
        snapshot_every: int,
        checkpoint_every: int,
        max_snapshot_bytes: int,
        events_end: Callable[[int], int],
        snapshots_end: Callable[[int], int] | None = None,
    ) -> None:
        """``topic``: the snapshots topic; ``events_end(p)``: the end of events partition p
        now (its high watermark), the offset a checkpoint records; ``snapshots_end(p)``: the
        same of snapshots partition p (None: never asked, an eviction's stub points at the
        partition's mark as it was at the restore)."""
        self.topic = topic
        self.snapshots_end = snapshots_end
        self.snapshot_every = snapshot_every
        self.checkpoint_every = checkpoint_every
        self.max_snapshot_bytes = max_snapshot_bytes
        self.events_end = events_end

    def after_command(self, state: PartitionState, session_id: str, outbox: Outbox) -> None:
        """A command of the session was applied: snapshot it if its time has come."""
        every = self.snapshot_every
        if every and state.sessions[session_id].events_since_snapshot >= every:
            self._snapshot(state, session_id, outbox)

    def after_batch(self, state: PartitionState, outbox: Outbox) -> None:
        """The batch's commands of the partition are applied: stage its rejections, then go on
        with a checkpoint. After the commands, so that what this transaction snapshots covers
        its own events."""
        self._stage_rejections(state, outbox)
        self._checkpoint(state, outbox)
        self._evict(state, outbox)
        residency = state.residency
        p = str(state.partition)
        metrics.RESIDENT_SESSIONS.labels(p).set(len(residency))
        metrics.RESIDENT_BYTES.labels(p).set(residency.resident_bytes)

    def _evict(self, state: PartitionState, outbox: Outbox) -> None:
        """The least recently used sessions past the budget leave memory once this transaction
        commits, snapshotted in it first if their latest snapshot lacks events (one too large
        to snapshot leaves too: its events are on the events topic). Up to
        ``EVICTION_BYTES_PER_BATCH`` of snapshots per transaction: the later batches go on."""
        residency = state.residency
        if residency.over():
            if self.snapshots_end is not None:
                # Where this transaction's snapshots will be, at the latest.
                state.snapshots_mark = self.snapshots_end(state.partition)
            budget = EVICTION_BYTES_PER_BATCH
            for session_id, size in residency.victims():
                held = state.sessions[session_id]
                if held.snapshot_last < len(held.session) - 1:
                    if budget <= 0:
                        residency.put_back(session_id, size)  # the next batch's to evict
                        break
                    budget -= self._snapshot(state, session_id, outbox) or 0
                del state.sessions[session_id]
                if len(held.session):  # else nothing to restore: a new session if it comes
                    residency.leave(session_id, held, held.stub(size))
                metrics.EVICTIONS.inc()
        residency.stage()

    def _stage_rejections(self, state: PartitionState, outbox: Outbox) -> None:
        """The batch's rejections into the transaction, so a retry gets them after a restore
        too; the memory keeps them once the transaction commits."""
        for key, slot in state.rejections.stage():
            value = encode_snapshot(
                WriterSnapshot(f"rejected/{state.partition}", (), state=slot.state())
            )
            outbox.put(state.partition, self.topic, value, key, state.partition, SNAPSHOT)

    def _snapshot(self, state: PartitionState, session_id: str, outbox: Outbox) -> int | None:
        """Produce the session's snapshot; its size, or None when it is too large to keep."""
        session_state = state.sessions.get(session_id)
        if session_state is None:
            # Evicted without a snapshot, as too large for one (they are never dirty else).
            return None
        value = b"" if session_state.oversized else session_state.snapshot()
        if session_state.oversized or len(value) > self.max_snapshot_bytes:
            # Snapshots only speed restores up; the events topic alone restores correctly.
            # Not built again: a session's snapshot never shrinks (SessionState.oversized).
            session_state.oversized = True
            session_state.events_since_snapshot = 0
            metrics.SNAPSHOTS.labels("skipped").inc()
            return None
        outbox.put(
            state.partition, self.topic, value, session_id.encode(), state.partition, SNAPSHOT
        )
        session_state.events_since_snapshot = 0
        session_state.snapshot_from = state.snapshots_mark
        session_state.snapshot_last = len(session_state.session) - 1
        session_state.events_from = state.events_mark
        state.dirty.discard(session_id)
        metrics.SNAPSHOTS.labels("written").inc()
        return len(value)

    def _checkpoint(self, state: PartitionState, outbox: Outbox) -> None:
        """Every ``checkpoint_every`` events X is taken (the partition's end now) together
        with the sessions that have events no snapshot covers; those are snapshotted a few per
        batch (``CHECKPOINT_BYTES_PER_BATCH``) rather than all in one transaction, which would
        stall every command behind megabytes of snapshots; once the last is written, so is
        the checkpoint.

        A session too large to snapshot cannot be covered: the checkpoint names it with where
        its uncovered events start, and a restore reads the events topic from the earliest of
        those, skipping every other session's records below X (:mod:`.restore`). So one such
        session costs a restore its own events, not the partition's traffic since it grew."""
        if state.checkpoint is None:
            every = self.checkpoint_every
            if not every or state.events_since_checkpoint < every:
                return
            if state.broken:
                # A session whose log does not restore has no snapshot: past a checkpoint, a
                # restore would not see its events at all and take it for a new session.
                return
            offset = state.events_mark = self.events_end(state.partition)
            if self.snapshots_end is not None:
                state.snapshots_mark = self.snapshots_end(state.partition)
            # Popped from the end: sorted in reverse, so sessions go in id order.
            state.checkpoint = Checkpoint(offset, sorted(state.dirty, reverse=True))
            state.events_since_checkpoint = 0
        checkpoint = state.checkpoint
        uncovered = checkpoint.uncovered
        budget = CHECKPOINT_BYTES_PER_BATCH
        while uncovered and budget > 0:
            session_id = uncovered.pop()
            if session_id not in state.dirty:
                continue  # snapshotted since, on its own schedule
            size = self._snapshot(state, session_id, outbox)
            if size is not None:
                budget -= size
                continue
            events_from = state.events_from(session_id)
            if events_from is None or session_id in state.broken:
                state.checkpoint = None  # nowhere to say its events are: no promise
                return
            checkpoint.unsnapshotted[session_id] = events_from
        if uncovered:
            return
        state.checkpoint = None
        value = encode_snapshot(
            WriterSnapshot(f"checkpoint/{state.partition}", (), state=checkpoint_state(checkpoint))
        )
        outbox.put(state.partition, self.topic, value, CHECKPOINT_KEY, state.partition, SNAPSHOT)
        metrics.SNAPSHOTS.labels("checkpoint").inc()
