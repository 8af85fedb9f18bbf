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

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException

from dsh.errors import SessionError
from producers.writer import metrics
from producers.writer.journal import SNAPSHOT, Outbox
from producers.writer.residency import Evicted
from producers.writer.restore import CHECKPOINT_KEY, checkpoint_state
from producers.writer.state import Checkpoint, PartitionState, SessionState, without_traceback
from schemas import WriterSnapshot, encode_snapshot

# Snapshot bytes a checkpoint in progress may add to one transaction (at least one session's).
CHECKPOINT_BYTES_PER_BATCH = 1 << 20
# Snapshot bytes evictions may add to one transaction (at least one session's): after a
# restore, every session past the budget may owe one, and all in one transaction could be
# gigabytes; the rest stay in memory a few batches longer.
EVICTION_BYTES_PER_BATCH = 4 << 20
# Evicted sessions taken out of the topics to be snapshotted per idle transaction, all its
# partitions together (Snapshots.take_out_owed): each is a read of the topics on the loop's
# thread, the consumer not polled meanwhile, and each stays in memory, beside the budget,
# until the transaction commits. Only idle transactions take sessions out; a command batch
# never waits for one.
TAKEN_OUT_PER_TRANSACTION = 4

log = logging.getLogger("dsh.writer")


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
        take_out_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``topic``: the snapshots topic; ``events_end(p)``: the end of events partition p
        now (its high watermark), the offset a checkpoint records; ``snapshots_end(p)``: the
        same of snapshots partition p (None: never asked, an eviction's stub points at the
        partition's mark as it was at the restore); ``take_out_seconds``: no session is taken
        out (:meth:`take_out_owed`) once this long has passed since the transaction's first
        (0: no time limit)."""
        self.topic = topic
        self.snapshots_end = snapshots_end
        self.snapshot_every = snapshot_every
        self.checkpoint_every = checkpoint_every
        self.max_snapshot_bytes = max_snapshot_bytes
        self.events_end = events_end
        self.take_out_seconds = take_out_seconds
        self.clock = clock
        # Taken out by take_out_owed for the idle transaction being built, by partition and
        # session: its state and stub, None if its reload failed (the checkpoint names it).
        self._taken: dict[
            tuple[int, str], tuple[PartitionState, tuple[SessionState, Evicted] | None]
        ] = {}

    def after_command(self, state: PartitionState, session_id: str, outbox: Outbox) -> None:
        """A command of the session was applied: snapshot it if its time has come."""
        every = self.snapshot_every
        if every and state.sessions[session_id].events_since_snapshot >= every:
            self._snapshot(state, session_id, outbox)

    def after_batch(self, state: PartitionState, outbox: Outbox, *, idle: bool = False) -> None:
        """The batch's commands of the partition are applied: stage its rejections, then go on
        with a checkpoint. After the commands, so that what this transaction snapshots covers
        its own events. ``idle``: a transaction of no command (:meth:`when_idle`)."""
        self._stage_rejections(state, outbox)
        self._checkpoint(state, outbox, idle)
        self._evict(state, outbox)
        residency = state.residency
        p = str(state.partition)
        metrics.RESIDENT_SESSIONS.labels(p).set(len(residency))
        metrics.RESIDENT_BYTES.labels(p).set(residency.resident_bytes)

    def owes_checkpoint(self, state: PartitionState) -> bool:
        """Whether the partition has a checkpoint to write before it is idle for good
        (:attr:`PartitionState.checkpoint_owed`)."""
        return (
            state.checkpoint_owed
            and bool(self.checkpoint_every)
            and (state.checkpoint is not None or self._can_cover_broken(state))
        )

    def take_out_owed(self, states: Iterable[PartitionState]) -> None:
        """Before an idle transaction produces anything: start the checkpoints the
        partitions owe, and take out of the topics the evicted sessions they will snapshot
        next, ``TAKEN_OUT_PER_TRANSACTION`` in all, none once ``take_out_seconds`` have passed
        since the first. The transaction's :meth:`when_idle` calls snapshot them; then
        :meth:`release_taken`. Done first, so that these reads, each a scan of the topics,
        count against no open transaction's timeout (the broker's clock starts at its first
        record); bounded, because the consumer is not polled meanwhile."""
        self.release_taken()
        left = TAKEN_OUT_PER_TRANSACTION
        started: float | None = None
        for state in states:
            if state.checkpoint is None:
                self._start_checkpoint(state)
            checkpoint = state.checkpoint
            if checkpoint is None:
                continue
            for session_id in reversed(checkpoint.uncovered):  # the order _checkpoint pops
                if not self._wants_out(state, session_id):
                    continue
                if not left or (
                    started is not None
                    and self.take_out_seconds
                    and self.clock() - started >= self.take_out_seconds
                ):
                    return
                if started is None:
                    started = self.clock()
                left -= 1
                taken = self._take_out(state, session_id)
                self._taken[state.partition, session_id] = (state, taken)
                if taken is None and session_id not in state.broken:
                    return  # the topics failed to answer: no more reads this transaction

    def release_taken(self) -> None:
        """The idle transaction is built (or failed): the sessions taken out that it did not
        snapshot are evicted again as they were, their stubs back."""
        taken, self._taken = self._taken, {}
        for (_, session_id), (state, held) in taken.items():
            if held is not None:
                state.residency.drop(session_id, held[1])

    def when_idle(self, state: PartitionState, outbox: Outbox) -> None:
        """No command came for a while: go on with the checkpoint the partition owes (started
        now if need be), in a transaction of its own, as a batch would, snapshotting the
        sessions :meth:`take_out_owed` took out."""
        if state.checkpoint is None:
            self._start_checkpoint(state)
        self.after_batch(state, outbox, idle=True)

    @staticmethod
    def _can_cover_broken(state: PartitionState) -> bool:
        """Whether a checkpoint can be written despite the partition's broken sessions: each
        must have been found broken by reading it back from its stub, evicted with events no
        snapshot covers: the checkpoint names it with where those start (the stub's
        ``events_from``), and a restore reads there what the reload read, finding it broken
        again. Any other (broken by a restore: a record that does not decode may lie anywhere,
        and its state is dropped) has no snapshot nor an offset to name: past a checkpoint, a
        restore would not see its events at all and take it for a new session."""
        return all(
            sid in state.broken_on_reload
            and sid in state.dirty
            and sid not in state.sessions
            and state.events_from(sid) is not None
            for sid in state.broken
        )

    def _start_checkpoint(self, state: PartitionState) -> None:
        if not self._can_cover_broken(state):
            state.checkpoint_owed = False
            return
        offset = state.events_mark = self.events_end(state.partition)
        if self.snapshots_end is not None:
            state.snapshots_mark = self.snapshots_end(state.partition)
        # Popped from the end: sorted in reverse, so sessions go in id order.
        state.checkpoint = Checkpoint(offset, sorted(state.dirty, reverse=True))
        state.events_since_checkpoint = 0

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
            return self._snapshot_evicted(state, session_id, outbox)
        return self._write(state, session_id, session_state, outbox)

    def _wants_out(self, state: PartitionState, session_id: str) -> bool:
        """Whether the checkpoint would take the session out to snapshot it: evicted with
        events no snapshot covers (by a restore past its budget), not broken, not too large to
        snapshot, not still leaving (its records are not committed yet), not one whose reload
        failed before (:attr:`PartitionState.unreadable`)."""
        if session_id not in state.dirty or session_id in state.sessions:
            return False
        if session_id in state.broken:
            return False  # its log does not rebuild: named by its stub (_can_cover_broken)
        if session_id in state.unreadable:
            return False  # its reload failed: named by its stub until used or restored
        stub = state.residency.evicted.get(session_id)
        # A snapshot holds every logged byte: past the limit, it could not fit either.
        return stub is not None and not stub.oversized and stub.size <= self.max_snapshot_bytes

    def _take_out(
        self, state: PartitionState, session_id: str
    ) -> tuple[SessionState, Evicted] | None:
        """The session's state and stub, read from the topics (its stub gone from
        ``residency.evicted`` until :meth:`release_taken` or its eviction again); None if it
        could not be read, its stub left where it was."""
        try:
            return state.residency.take_out(session_id)
        except SessionError as exc:
            state.found_broken_on_reload(session_id, exc)
        except KafkaException as exc:
            # The reload's doubt (a read that timed out, a record not where the stub says):
            # the session stays named, as before, and the transaction goes on; a restore of
            # every partition would cost far more than one named session. Not read again
            # (_wants_out): no idle transaction waits on it, nor is a checkpoint owed for it.
            state.unreadable.add(session_id)
            log.warning(
                "partition %d: session %r not snapshotted, its reload failed: %s",
                state.partition,
                session_id,
                without_traceback(exc),
                extra={"partition": state.partition},
            )
        return None

    def _snapshot_evicted(
        self, state: PartitionState, session_id: str, outbox: Outbox
    ) -> int | None:
        """Snapshot a session :meth:`take_out_owed` took out of the topics for this idle
        transaction, and evict it again once the transaction commits, never resident, so the
        budget holds. None (not snapshotted) for any other evicted session."""
        taken = self._taken.pop((state.partition, session_id), None)
        if taken is None or taken[1] is None:
            return None
        held, stub = taken[1]
        try:
            size = self._write(state, session_id, held, outbox)
        except BaseException:
            state.residency.drop(session_id, stub)  # evicted again as it was
            raise
        state.residency.leave(session_id, held, held.stub(stub.size))
        if size is not None:
            metrics.EVICTED_SNAPSHOTTED.inc()
        return size

    def _write(
        self, state: PartitionState, session_id: str, session_state: SessionState, outbox: Outbox
    ) -> int | None:
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

    def _checkpoint(self, state: PartitionState, outbox: Outbox, idle: bool) -> None:
        """Every ``checkpoint_every`` events X is taken (the partition's end now) together
        with the sessions that have events no snapshot covers; those are snapshotted a few per
        batch (``CHECKPOINT_BYTES_PER_BATCH``) rather than all in one transaction, which would
        stall every command behind megabytes of snapshots; once the last is written, so is
        the checkpoint.

        A session a restore evicted with events no snapshot covers is taken out of the topics
        to be snapshotted (:meth:`_snapshot_evicted`) by idle transactions only
        (:meth:`take_out_owed`): named instead, it would hold every later checkpoint at its
        first such event for as long as it stays quiet. A command batch names it, as for a
        session too large to snapshot, and the partition still owes a checkpoint.

        A session too large to snapshot cannot be covered: the checkpoint names it with where
        its uncovered events start, and a restore reads the events topic from the earliest of
        those, skipping every other session's records below X (:mod:`.restore`). So one such
        session costs a restore its own events, not the partition's traffic since it grew."""
        if state.checkpoint is None:
            every = self.checkpoint_every
            if not every or state.events_since_checkpoint < every:
                return
            self._start_checkpoint(state)
        checkpoint = state.checkpoint
        if checkpoint is None:
            return
        uncovered = checkpoint.uncovered
        budget = CHECKPOINT_BYTES_PER_BATCH
        taken = self._taken
        # Past the bytes budget, still the sessions already taken out: read for nothing else.
        while uncovered and (budget > 0 or (state.partition, uncovered[-1]) in taken):
            session_id = uncovered.pop()
            if session_id not in state.dirty:
                continue  # snapshotted since, on its own schedule
            wanted = idle and (state.partition, session_id) not in taken
            if wanted and self._wants_out(state, session_id):
                # Past this transaction's take-outs: the next idle one's to take out.
                uncovered.append(session_id)
                return
            size = self._snapshot(state, session_id, outbox)
            if size is not None:
                budget -= size
                continue
            # Not snapshotted: too large, broken, not read back (its reload failed), or in a
            # command batch, which never waits behind a reload (at most a scan of the events
            # topic, and the commands' transaction open meanwhile). Named: sound, as a restore
            # reads its events from there, only slower. The checkpoint is still owed for it.
            events_from = state.events_from(session_id)
            if events_from is None:
                state.checkpoint = None  # nowhere to say its events are: no promise
                state.checkpoint_owed = False
                return
            checkpoint.unsnapshotted[session_id] = events_from
        if uncovered:
            return
        state.checkpoint = None
        # Owed again while it names a session an idle transaction would take out: one a
        # command batch named (it never takes out), left to the next idle one. Never for one
        # broken or whose reload failed (_wants_out): so each idle transaction takes out, or
        # names for good, at least one session, and they do not spin.
        state.checkpoint_owed = any(self._wants_out(state, sid) for sid in checkpoint.unsnapshotted)
        value = encode_snapshot(
            WriterSnapshot(f"checkpoint/{state.partition}", (), state=checkpoint_state(checkpoint))
        )
        outbox.put(state.partition, self.topic, value, CHECKPOINT_KEY, state.partition, SNAPSHOT)
        metrics.SNAPSHOTS.labels("checkpoint").inc()
