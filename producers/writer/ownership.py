"""The partitions a writer serves, and restoring them before it serves them.

Owning commands partition p is the sole right to append to the sessions that hash to p. A
writer that is assigned p first reads where its commands resume (the group's committed
offset, once no open transaction holds it: a dead owner's is fenced, see :mod:`.takeover`),
then restores p's sessions from the snapshots and events topics (:mod:`.restore`). While a
broker is down, partition leadership moves and the coordinator may be away, so both are
retried with backoff rather than failing the process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from dsh.projections import Interpreter
from producers.errors import WriterFencedError
from producers.writer import metrics
from producers.writer.reload import reload_session
from producers.writer.residency import Budget, Evicted
from producers.writer.restore import restore_partition
from producers.writer.settings import WriterSettings
from producers.writer.state import PartitionState, SessionState
from producers.writer.takeover import fence_stuck_owners
from servicekit import kafka_clients
from servicekit.gc_tuning import built_frozen
from servicekit.kafka_clients import partition_ids
from servicekit.partition_reader import PartitionReadError, high_watermark
from servicekit.settings import KafkaSettings
from servicekit.topics import Topics

log = logging.getLogger("dsh.writer")

_BACKOFF_FIRST_S = 0.2
_BACKOFF_MAX_S = 5.0


class Ownership:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: WriterSettings,
        topics: Topics,
        writer_id: str,
        interpreters: Mapping[str, Interpreter],
        stop: threading.Event,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.topics = topics
        self.writer_id = writer_id
        self.interpreters = interpreters
        self._stop = stop
        self.partitions: dict[int, PartitionState] = {}
        self.budget = Budget(settings.max_resident_sessions, settings.max_resident_bytes)
        self._reader: Consumer | None = None  # read_committed: what a restore reads
        self._probe: Consumer | None = None  # read_uncommitted: the partitions' ends
        # Reads the group's committed offsets without waiting for open transactions.
        self._peek: Consumer | None = None

    def start(self) -> None:
        self._reader, self._probe = self._new_readers()
        self._peek = kafka_clients.offsets_peek(self.kafka, self.settings.group_id)

    def close(self) -> None:
        for c in (self._reader, self._probe, self._peek):
            if c is not None:
                c.close()
        self.partitions.clear()
        metrics.PARTITIONS_OWNED.set(0)

    def events_end(self, partition: int) -> int:
        """The events partition's end now, past any open transaction."""
        assert self._probe is not None
        return high_watermark(self._probe, self.topics.events, partition)

    def snapshots_end(self, partition: int) -> int:
        """The snapshots partition's end now, past any open transaction."""
        assert self._probe is not None
        return high_watermark(self._probe, self.topics.snapshots, partition)

    def drop(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.partitions.pop(tp.partition, None)
            _forget_gauges(tp.partition)
        metrics.PARTITIONS_OWNED.set(len(self.partitions))
        self._share_budget()

    def _share_budget(self) -> None:
        """Each owned partition gets an even share of the writer's resident-session budget."""
        share = self.budget.share(len(self.partitions))
        for state in self.partitions.values():
            state.residency.budget = share

    def _reload(self, partition: int, session_id: str, stub: Evicted) -> SessionState:
        assert self._reader is not None
        return reload_session(
            self._reader,
            (self.topics.events, self.topics.snapshots),
            partition,
            session_id,
            stub,
            self.interpreters,
            self.settings.restore_timeout_ms / 1000,
        )

    def restore(self, consumer: Consumer, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Restore the partitions' sessions; returns where their consumption must resume.

        While a broker is down, partition leadership moves and the coordinator may be away:
        reading offsets or watermarks fails for a while (timed out, unknown partition). That
        is retried with backoff, for up to half the max poll interval (nothing polls the group
        meanwhile), rather than failing the process."""
        deadline = time.monotonic() + self.settings.max_poll_interval_ms / 2000
        backoff = _BACKOFF_FIRST_S
        restored: set[int] = set()  # kept across attempts: only the failed ones are redone
        while True:
            try:
                with built_frozen(self.settings.gc_freeze):
                    return self._restore_once(consumer, partitions, restored)
            except (KafkaException, PartitionReadError) as exc:
                if self._stop.is_set() or time.monotonic() + backoff > deadline:
                    for p in restored:
                        self.partitions.pop(p, None)  # never assigned: nothing may serve them
                    raise
                metrics.RESTORE_RETRIES.inc()
                log.warning(
                    "restoring partitions %s failed (%s); trying again in %.1fs",
                    partition_ids(partitions),
                    exc,
                    backoff,
                )
                self._renew_readers()
                time.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _renew_readers(self) -> None:
        """Fresh reader and probe clients: whatever a failed attempt left in theirs (cached
        metadata of a broker that was restarting, a fetch stuck on a dead leader) goes."""
        for c in (self._reader, self._probe):
            if c is not None:
                c.close()
        self._reader, self._probe = self._new_readers()

    def _new_readers(self) -> tuple[Consumer, Consumer]:
        """The restore's reader (read_committed) and its watermark probe (read_uncommitted)."""
        topics = (self.topics.events, self.topics.snapshots)
        return (
            kafka_clients.reader(self.kafka, topics=topics),
            kafka_clients.reader(self.kafka, "read_uncommitted", topics=topics),
        )

    def _restore_once(
        self, consumer: Consumer, partitions: list[TopicPartition], restored: set[int]
    ) -> list[TopicPartition]:
        assert self._reader is not None and self._probe is not None
        timeout = self.settings.restore_timeout_ms / 1000
        # Waits for offsets a previous owner's transaction still has pending (the fetch asks
        # for stable offsets under read_committed), so we resume where the log really is.
        committed = self._stable_offsets(
            consumer,
            [TopicPartition(self.topics.commands, tp.partition) for tp in partitions],
            timeout,
        )
        # Each partition's share once these are owned too: what its restore builds.
        share = self.budget.share(len(self.partitions.keys() | {tp.partition for tp in committed}))
        for tp in committed:
            if tp.partition in restored:
                continue
            started = time.monotonic()
            state = restore_partition(
                self._reader,
                self._probe,
                (self.topics.events, self.topics.snapshots),
                tp.partition,
                timeout,
                interpreters=self.interpreters,
                rejection_slots=self.settings.rejection_slots,
                budget=share,
            )
            state.residency.reload = functools.partial(self._reload, tp.partition)
            state.commands_next = tp.offset if tp.offset >= 0 else None
            self.partitions[tp.partition] = state
            restored.add(tp.partition)
            elapsed = time.monotonic() - started
            metrics.RESTORE_SECONDS.observe(elapsed)
            log.info(
                "partition %d restored in %.2fs: %d sessions in memory, %d evicted, events "
                "read from offset %d, resuming at command offset %s",
                tp.partition,
                elapsed,
                len(state.sessions),
                len(state.residency.evicted),
                state.restored_from,
                tp.offset if tp.offset >= 0 else "beginning",
                extra={"partition": tp.partition},  # a context field of the structured line
            )
        metrics.PARTITIONS_OWNED.set(len(self.partitions))
        self._share_budget()
        for p in restored:
            evict_restored(self.partitions[p])
        return [
            TopicPartition(
                tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]

    def _stable_offsets(
        self, consumer: Consumer, partitions: list[TopicPartition], timeout: float
    ) -> list[TopicPartition]:
        """The committed offsets, once no open transaction holds them (the fetch asks for
        stable offsets under read_committed). Past ``fence_after_ms`` the writers holding them
        that have left the group are fenced, which aborts their transactions now instead of
        at their timeout (:mod:`.takeover`)."""
        assert self._peek is not None
        asked = time.monotonic()
        fence_after = self.settings.fence_after_ms / 1000
        try:
            if 0 < fence_after < timeout:
                try:
                    return consumer.committed(partitions, fence_after)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._TIMED_OUT:
                        raise
                fence_stuck_owners(
                    self.kafka,
                    self.settings.group_id,
                    self.writer_id,
                    self._peek,
                    partitions,
                    self.settings.transaction_timeout_ms,
                )
            return consumer.committed(partitions, timeout)
        finally:
            waited = time.monotonic() - asked
            metrics.OFFSETS_WAIT_SECONDS.observe(waited)
            if waited >= 1.0:
                log.info(
                    "waited %.1fs for stable committed offsets of partitions %s",
                    waited,
                    partition_ids(partitions),
                )

    def release_all(self) -> list[TopicPartition]:
        """Drop every partition's state (after a failed transaction: trust nothing in memory);
        returns the partitions, for :meth:`rewind`."""
        owned = [TopicPartition(self.topics.commands, p) for p in self.partitions]
        for p in self.partitions:
            _forget_gauges(p)
        self.partitions.clear()
        return owned

    def rewind(self, consumer: Consumer, owned: list[TopicPartition]) -> None:
        """Restore ``owned`` from the log and read their commands again from the committed
        offsets."""
        for tp in self.restore(consumer, owned):
            try:
                consumer.seek(tp)
            except KafkaException as seek_exc:
                if any(a.partition == tp.partition for a in consumer.assignment()):
                    # Still ours but not rewound: serving on would skip the aborted commands.
                    raise WriterFencedError(
                        f"writer {self.writer_id}: cannot rewind partition "
                        f"{tp.partition} after an abort: {seek_exc}"
                    ) from seek_exc
                # Already taken away (membership lost): its next owner starts at the commit.
                self.partitions.pop(tp.partition, None)
                log.warning(
                    "partition %d left while recovering: %s",
                    tp.partition,
                    seek_exc,
                    extra={"partition": tp.partition},
                )


def evict_restored(state: PartitionState) -> None:
    """Evict a restored partition's sessions past its budget: all they hold is committed, so
    their stubs point at it at once. Not the sessions with events after their snapshot: kept
    resident, the batch that evicts them later snapshots them first (:mod:`.snapshots`). Those
    past the budget anyway are evicted by :func:`.restore.restore_partition` itself, and
    snapshotted by an idle transaction's checkpoint, which takes them out of the topics
    without making them resident (:meth:`.Snapshots.take_out_owed`)."""
    residency = state.residency
    for session_id, size in residency.victims(keep=state.dirty):
        held = state.sessions.pop(session_id)
        residency.drop(session_id, held.stub(size))
        metrics.EVICTIONS.inc()


def _forget_gauges(partition: int) -> None:
    for gauge in (metrics.RESIDENT_SESSIONS, metrics.RESIDENT_BYTES):
        with contextlib.suppress(KeyError):  # never set: nothing served yet
            gauge.remove(str(partition))
