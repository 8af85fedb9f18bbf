"""The single-writer service: owning commands partition p is the sole right to append to the
sessions that hash to p.

One loop, one thread: poll a batch of commands, validate each against the in-memory session,
produce events + replies (+ snapshots), send the command offsets with the group metadata
(KIP-447: a writer that lost the partition is fenced there), commit. Rebalance callbacks run
inside ``poll``, between transactions, so a partition is never revoked mid-batch. Any abort or
doubt drops the in-memory state and restores it from the log — except a transaction refused
only because the group's generation moved on (another writer joined or left): the records it
held are produced again in a new transaction, for the partitions still owned.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from dsh.errors import SessionError
from producers import metrics
from producers.errors import (
    MalformedCommandError,
    PayloadTooLargeError,
    WriterFencedError,
    WrongPartitionError,
)
from producers.restore import CHECKPOINT_KEY, restore_partition
from producers.settings import WriterSettings
from producers.state import (
    Limits,
    Outcome,
    PartitionState,
    use_interpreters,
    without_traceback,
)
from producers.takeover import fence_stuck_owners, lane_id, offsets_metadata
from producers.tenancy import Tenancy
from producers.wire import committed_reply, event_wire
from schemas import (
    APPEND_REPLY,
    HEADER_REQUEST,
    WRITER_SNAPSHOT,
    AppendCommand,
    AppendReply,
    WriterSnapshot,
    encode_event,
    encode_reply,
    encode_snapshot,
    event_headers,
    record_headers,
)
from schemas.frames import DraftFrame, decode_command_frames, event_prefix, event_value
from servicekit import kafka_clients
from servicekit.dlq import dead_letter_headers, source_of
from servicekit.gc_tuning import built_frozen, observe_gc_pauses, young_gc_threshold
from servicekit.interpreters import parse_interpreters
from servicekit.kafka_clients import Membership, partition_ids
from servicekit.partition_reader import PartitionReadError, high_watermark
from servicekit.partitioning import partition_for
from servicekit.settings import ConfigError, KafkaSettings
from servicekit.topics import Topics, partition_counts
from servicekit.watchdog import CallWatchdog

log = logging.getLogger("dsh.writer")

_KAFKA_TIMEOUT_S = 30.0
# Shutdown waits this long at most for an abort: SIGTERM has a deadline of its own (k8s: 30 s).
_CLOSE_TIMEOUT_S = 5.0
_HANG_FAILPOINT = "hang-in-send-offsets-after"
# Topics created a moment ago may not be in every broker's metadata yet.
_TOPICS_APPEAR_S = 5.0
# Snapshot bytes a checkpoint in progress may add to one transaction (at least one session's).
CHECKPOINT_BYTES_PER_BATCH = 1 << 20

_BACKOFF_FIRST_S = 0.2
_BACKOFF_MAX_S = 5.0
# New producers in a row with no committed transaction between them before the writer gives
# up and exits (an error that a new producer does not cure; the supervisor takes over).
_MAX_REPLACEMENTS = 5


_Headers: TypeAlias = list[tuple[str, str | bytes | None]]
# A transaction's journal is flat, _FIELDS plain values per record: the commands partition it
# serves, topic, value, key, partition (-1: the partitioner's choice), what its headers are (an
# event type, _REPLY, _SNAPSHOT, or the headers themselves) and the request id. A tuple and a
# headers list per record, kept until the commit, made every young collection of the writer
# several times costlier (writer_bench's backlog drain: 500 ms of collections against 93).
_FIELDS = 7
_REPLY, _SNAPSHOT = "reply", "snapshot"  # never event types: those have a "/"


@dataclass(frozen=True)
class _Transaction:
    """What a transaction holds: its command offsets and every record it produced, in order, so
    that it can be produced again when only the group's generation made it fail."""

    lane: int  # index of its producer
    offsets: dict[int, int]
    journal: list[Any]  # _FIELDS values per record
    # The in-memory state each partition's commands were applied to: a partition restored
    # since (revoked and assigned again, recovered) has another, which lacks these records.
    states: dict[int, PartitionState]


@dataclass(frozen=True)
class _Committing:
    """A transaction whose commit runs on the commit thread while the next one is built."""

    txn: _Transaction
    done: Future[None]

    @property
    def lane(self) -> int:
        return self.txn.lane

    def failure(self) -> KafkaException | None:
        """Waits for the commit and returns its failure, without raising it: each raise of
        one error object adds the raising frame to its traceback, and a frame that holds this
        transaction (and so the error) makes a cycle, which a frozen heap keeps until a
        recovery sweeps it (DSH_WRITER_GC_FREEZE). Its traceback, the commit thread's frames,
        is dropped too."""
        error = self.done.exception()
        if error is None:
            return None
        if not isinstance(error, KafkaException):
            raise error  # not Kafka's doing: the process fails loudly (see _process)
        return without_traceback(error)


class Writer:
    def __init__(self, kafka: KafkaSettings, settings: WriterSettings) -> None:
        self.kafka = kafka
        self.settings = settings
        self.topics = Topics.of(kafka)
        self.limits = Limits(settings.max_event_bytes, settings.max_command_bytes)
        use_interpreters(parse_interpreters(settings.projections))
        self.partitions: dict[int, PartitionState] = {}
        self.transactional_id = settings.transactional_id or f"dsh-writer-{uuid.uuid4().hex}"
        self._shared_id = bool(settings.transactional_id)  # another process may start with it
        self._stop = threading.Event()
        self._failpoint = settings.failpoint
        # Failpoint "hang-in-send-offsets-after:S": the first offsets sent S seconds after
        # start never return, as librdkafka's sometimes do not (servicekit/watchdog.py).
        kind, _, after = settings.failpoint.partition(":")
        self._hang_at = time.monotonic() + float(after) if kind == _HANG_FAILPOINT else None
        self._watchdog = CallWatchdog(settings.stuck_call_grace_s)
        self._watch = self._watchdog.watch
        # The producer of the open transaction; with commit overlap there are two that take
        # turns (see _process), each with its own transactional id.
        self._producer: Producer | None = None
        self._producers: list[Producer] = []
        self._turn = 0
        self._open: set[int] = set()  # producers with a transaction begun and not ended
        self._committing: _Committing | None = None
        self._committer: ThreadPoolExecutor | None = None
        # A commit that failed in a rebalance callback, recovered once poll returns.
        self._deferred: tuple[KafkaException, _Committing] | None = None
        self._building: _Transaction | None = None  # the transaction _process is building
        self._consumer: Consumer | None = None
        self._reader: Consumer | None = None
        self._probe: Consumer | None = None
        # Reads the group's committed offsets without waiting for open transactions.
        self._peek: Consumer | None = None
        self._offsets_metadata = ""  # names this writer with the offsets it commits
        self._stop_before_commit = False  # failpoint "stop-before-commit" hit in this batch
        self._partition_count = 0
        self._reply_partitions = 0
        self._membership: Membership | None = None
        self._replacements = 0  # new producers since the last committed transaction
        self._last_batch_at = 0.0  # monotonic time the last batch was taken
        # murmur2 in Python costs more than the rest of routing a command; ids repeat a lot.
        self._partition_of = functools.lru_cache(maxsize=1 << 16)(partition_for)
        self._tenancy = Tenancy.parse(
            settings.tenant_prefixes, settings.tenant_keys.get_secret_value()
        )

    # -- lifecycle ------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        observe_gc_pauses(metrics.GC_PAUSES)
        self._start()
        freeze = self.settings.gc_freeze
        try:
            with young_gc_threshold(self.settings.gc_threshold):
                while not self._stop.is_set():
                    self._step()
                    if freeze and gc.get_count()[1]:
                        # A young collection ran: what it left is long-lived session state
                        # (acyclic), and an older collection would walk all of it, a stop of
                        # about a second per 2.5 million objects. The permanent generation is
                        # never walked; garbage in it is still freed by reference counting,
                        # and cycles, which the writer makes none of, by the sweep at each
                        # recovery (_sweep_frozen_heap).
                        gc.freeze()
        finally:
            self._close()
            if freeze:
                # A process that goes on (tests, a host embedding the writer) gets its heap
                # back under the collector.
                gc.unfreeze()

    def _start(self) -> None:
        t = self.topics
        counts = partition_counts(
            self.kafka,
            [t.commands, t.events, t.replies, t.snapshots],
            _KAFKA_TIMEOUT_S,
            appear_s=_TOPICS_APPEAR_S,
        )
        if counts[t.commands] != counts[t.events] or counts[t.snapshots] != counts[t.events]:
            raise ConfigError(
                f"commands, events and snapshots must have one partition count, got {counts}",
                code="PARTITION_MISMATCH",
            )
        self._partition_count = counts[t.commands]
        self._reply_partitions = counts[t.replies]
        s = self.settings
        lanes = 2 if s.overlap_commits else 1
        self._offsets_metadata = offsets_metadata(self.transactional_id, lanes)
        self._producers = [self._new_producer(i) for i in range(lanes)]
        for producer in self._producers:
            with self._watch("init_transactions", _KAFKA_TIMEOUT_S):
                producer.init_transactions(_KAFKA_TIMEOUT_S)
        self._producer = self._producers[0]
        if lanes > 1:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="dsh-commit")
        self._reader, self._probe = self._new_readers()
        self._peek = kafka_clients.offsets_peek(self.kafka, s.group_id)
        self._consumer = kafka_clients.group_consumer(
            self.kafka,
            s.group_id,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            # The group's member list is how a new owner tells a live writer from a dead one
            # (producers/takeover.py).
            client_id=self.transactional_id,
            max_poll_interval_ms=s.max_poll_interval_ms,
        )
        self._membership = Membership(
            self._consumer, [t.commands], self, log, f"writer {self.transactional_id}"
        )
        log.info(
            "writer %s started: group %s, %d partitions",
            self.transactional_id,
            s.group_id,
            self._partition_count,
        )

    def _lane_id(self, lane: int) -> str:
        return lane_id(self.transactional_id, lane)

    def _new_producer(self, lane: int) -> Producer:
        s = self.settings
        return kafka_clients.producer(
            self.kafka,
            **{
                "transactional.id": self._lane_id(lane),
                "transaction.timeout.ms": s.transaction_timeout_ms,
                # librdkafka's default backoff puts a ~100 ms floor under back-to-back
                # transactions (the coordinator answers CONCURRENT_TRANSACTIONS for a moment).
                "retry.backoff.ms": 1,
                "retry.backoff.max.ms": 10,
                "linger.ms": s.linger_ms,
                "socket.timeout.ms": min(60_000, s.transaction_timeout_ms),
            },
        )

    def _close(self) -> None:
        failure = self._settle_quietly()
        if failure is not None:
            log.warning("the last transaction did not commit: %s", failure[0])
        if self._committer is not None:
            self._committer.shutdown()
        if self._consumer is not None:
            try:
                self._consumer.close()  # leaves the group now, so a successor needn't wait
            except KafkaException as exc:
                log.warning("closing the group consumer: %s", exc)
        for c in (self._reader, self._probe, self._peek):
            if c is not None:
                c.close()
        self._close_producers()
        self.partitions.clear()
        metrics.PARTITIONS_OWNED.set(0)
        self._watchdog.close()
        log.info("writer %s stopped", self.transactional_id)

    def _close_producers(self) -> None:
        """End the producers now rather than at garbage collection (their threads would go on
        reconnecting to a broker that is gone). A transaction begun and not committed is
        aborted first: its commands go to the next owner with their offsets. A producer whose
        abort failed is left to the collector, as closing it would try the abort again and
        wait for a coordinator that did not answer."""
        for lane, producer in enumerate(self._producers):
            if lane in self._open:
                try:
                    with self._watch("abort_transaction", _CLOSE_TIMEOUT_S):
                        producer.abort_transaction(_CLOSE_TIMEOUT_S)
                except KafkaException as exc:
                    log.warning("%s: abort at shutdown: %s", self._lane_id(lane), exc)
                    continue
                self._open.discard(lane)
            try:
                producer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("%s: close: %s", self._lane_id(lane), exc)
        self._producers = []
        self._producer = None

    # -- ownership ------------------------------------------------------------------------

    def _restore(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
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
                    return self._restore_once(partitions, restored)
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
        self, partitions: list[TopicPartition], restored: set[int]
    ) -> list[TopicPartition]:
        assert self._consumer is not None and self._reader is not None
        assert self._probe is not None
        timeout = self.settings.restore_timeout_ms / 1000
        # Waits for offsets a previous owner's transaction still has pending (the fetch asks
        # for stable offsets under read_committed), so we resume where the log really is.
        committed = self._stable_offsets(
            [TopicPartition(self.topics.commands, tp.partition) for tp in partitions], timeout
        )
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
                rejection_slots=self.settings.rejection_slots,
            )
            self.partitions[tp.partition] = state
            restored.add(tp.partition)
            elapsed = time.monotonic() - started
            metrics.RESTORE_SECONDS.observe(elapsed)
            log.info(
                "partition %d restored in %.2fs: %d sessions, events read from offset %d, "
                "resuming at command offset %s",
                tp.partition,
                elapsed,
                len(state.sessions),
                state.restored_from,
                tp.offset if tp.offset >= 0 else "beginning",
                extra={"partition": tp.partition},  # a context field of the structured line
            )
        metrics.PARTITIONS_OWNED.set(len(self.partitions))
        return [
            TopicPartition(
                tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]

    def _stable_offsets(
        self, partitions: list[TopicPartition], timeout: float
    ) -> list[TopicPartition]:
        """The committed offsets, once no open transaction holds them (the fetch asks for
        stable offsets under read_committed). Past ``fence_after_ms`` the writers holding them
        that have left the group are fenced, which aborts their transactions now instead of
        at their timeout (producers/takeover.py)."""
        assert self._consumer is not None and self._peek is not None
        asked = time.monotonic()
        fence_after = self.settings.fence_after_ms / 1000
        try:
            if 0 < fence_after < timeout:
                try:
                    return self._consumer.committed(partitions, fence_after)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._TIMED_OUT:
                        raise
                fence_stuck_owners(
                    self.kafka,
                    self.settings.group_id,
                    self.transactional_id,
                    self._peek,
                    partitions,
                    self.settings.transaction_timeout_ms,
                )
            return self._consumer.committed(partitions, timeout)
        finally:
            waited = time.monotonic() - asked
            metrics.OFFSETS_WAIT_SECONDS.observe(waited)
            if waited >= 1.0:
                log.info(
                    "waited %.1fs for stable committed offsets of partitions %s",
                    waited,
                    partition_ids(partitions),
                )

    # servicekit.kafka_clients.Membership calls these from inside poll.

    def owned(self) -> list[int]:
        return sorted(self.partitions)

    def assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return self._restore(partitions)

    def revoke(self, partitions: list[TopicPartition]) -> None:
        # The transaction still committing may hold commands of these partitions: it ends
        # before they go, so their next owner finds its offsets settled and need not wait.
        failure = self._settle_quietly()
        if failure is not None and self._deferred is None:
            self._deferred = failure  # recovered right after poll returns
        for tp in partitions:
            self.partitions.pop(tp.partition, None)
        metrics.PARTITIONS_OWNED.set(len(self.partitions))

    # -- batches --------------------------------------------------------------------------

    def _step(self) -> None:
        assert self._consumer is not None
        if self._committing is not None and self._committing.done.done():
            self._settle_or_recover()
        first = self._consumer.poll(self.settings.poll_timeout_ms / 1000)
        assert self._membership is not None
        self._membership.raise_pending()
        if self._deferred is not None:
            (exc, failed), self._deferred = self._deferred, None
            self._committing, lane = failed, failed.lane  # _recover reads its failure again
            del failed  # it holds its partitions' states, which the recovery drops
            if self._recover(exc, lane):
                # Every owned partition was rewound to its committed offset: this record,
                # fetched before, comes again in order after the commands before it.
                return
        if first is None:
            return
        # poll returns as soon as one record is there; drain what is already fetched without
        # waiting, so a quiet stream gets low latency and a busy one big batches. With a
        # minimum interval, a batch right after another waits out the rest of it for more.
        now = time.monotonic()
        wait = self._last_batch_at + self.settings.min_transaction_interval_ms / 1000 - now
        rest = self._consumer.consume(self.settings.batch_max_commands - 1, max(wait, 0))
        self._last_batch_at = time.monotonic() if wait > 0 else now
        batch = [first, *rest]
        records = []
        taken_ms = time.time() * 1000
        for m in batch:
            err = m.error()
            if err is None:
                records.append(m)
                _, ts = m.timestamp()
                if ts > 0:
                    metrics.COMMAND_WAIT.observe(max(0.0, taken_ms - ts) / 1000)
            else:
                log.warning("consumer error: %s", err)
        if records:
            self._process(records)

    def _process(self, records: list[Message]) -> None:
        """One transaction for the batch. With commit overlap it is built on the producer whose
        turn it is while the previous transaction commits on the other one: it is produced
        once the previous one's records are acknowledged (so they stay first in every
        partition), and committed only once the previous one has committed (so it is never
        visible without it; if that one fails, this one is aborted with it)."""
        lane = self._turn
        try:
            self._transact(lane, records)
        except KafkaException as exc:
            # The traceback holds the batch's frames and, in them, its partitions' states,
            # which the recovery drops: let them go with it (see _sweep_frozen_heap).
            self._recover(without_traceback(exc), lane)
        except BaseException:
            # Not Kafka's doing: publish nothing of this batch, and let the process fail
            # loudly rather than serve from state the log may lack.
            self._abort_quietly()
            raise

    def _transact(self, lane: int, records: list[Message]) -> None:
        """:meth:`_process`'s transaction, built, produced, and committed or handed to the
        commit thread."""
        assert self._consumer is not None
        producer = self._producer = self._producers[lane]
        txn = self._building = _Transaction(lane, {}, [], {})
        offsets, states = txn.offsets, txn.states
        begun = time.monotonic()
        with self._watch("begin_transaction", _KAFKA_TIMEOUT_S):  # local, no timeout
            producer.begin_transaction()
        self._open.add(lane)
        handled = 0
        for m in records:
            p = m.partition()
            state = self.partitions.get(p)  # type: ignore[arg-type]
            if state is None:
                continue  # revoked since it was fetched: its new owner serves it
            self._handle(m, state)
            offsets[p] = m.offset() + 1  # type: ignore[index,operator]
            states[p] = state  # type: ignore[index]
            handled += 1
        if not offsets:
            self._building = None
            with self._watch("abort_transaction", _KAFKA_TIMEOUT_S):
                producer.abort_transaction(_KAFKA_TIMEOUT_S)
            self._open.discard(lane)
            return
        for p in offsets:
            self._stage_rejections(self.partitions[p])
            self._maybe_checkpoint(self.partitions[p])
        started = time.monotonic()
        metrics.PHASE_VALIDATE.observe(started - begun)
        metrics.BATCH_COMMANDS.observe(handled)
        group = self._consumer.consumer_group_metadata()
        if unfenced(group):
            raise KafkaException(
                KafkaError(
                    KafkaError.UNKNOWN_MEMBER_ID,
                    "group membership lost before the offsets were sent",
                )
            )
        self._send_offsets(producer, offsets, group)
        sent = time.monotonic()
        if self._stop_before_commit:
            self._stop_before_commit = False
            self._failpoint_stop("committing")
        if self._committer is None:
            self._commit(producer, records, started, sent)
            self._building = None
            self._committed(lane, offsets)
            return
        # Acknowledged records of this transaction (or its doom, which the commit
        # reports) before the next transaction produces after them.
        with self._watch("flush", _KAFKA_TIMEOUT_S):
            producer.flush(_KAFKA_TIMEOUT_S)
        flushed = time.monotonic()
        self._settle()
        metrics.PHASE_FLUSH.observe(flushed - sent)
        metrics.PHASE_PREVIOUS.observe(time.monotonic() - flushed)
        self._committing = _Committing(
            txn, self._committer.submit(self._commit, producer, records, started, sent)
        )
        self._building = None
        self._turn = (lane + 1) % len(self._producers)

    def _send_offsets(self, producer: Producer, offsets: dict[int, int], group: object) -> None:
        """The commands' next offsets into the producer's transaction, with the group's metadata
        (KIP-447) and this writer's name (producers/takeover.py)."""
        with self._watch("send_offsets_to_transaction", _KAFKA_TIMEOUT_S):
            if self._hang_at is not None and time.monotonic() >= self._hang_at:
                self._hang_at = None
                log.warning("failpoint: hanging in send_offsets_to_transaction")
                threading.Event().wait()  # never set: what librdkafka #5456 does
            producer.send_offsets_to_transaction(
                [
                    TopicPartition(self.topics.commands, p, o, metadata=self._offsets_metadata)
                    for p, o in offsets.items()
                ],
                group,
                _KAFKA_TIMEOUT_S,
            )

    def _commit(
        self, producer: Producer, records: list[Message], started: float, sent: float
    ) -> None:
        """Commits the producer's transaction (retrying what librdkafka says may be retried)
        and observes its metrics. Runs on the commit thread with overlap."""
        for attempt in range(3):
            try:
                with self._watch("commit_transaction", _KAFKA_TIMEOUT_S):
                    producer.commit_transaction(_KAFKA_TIMEOUT_S)
                break
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if not err.retriable() or attempt == 2:
                    raise
        done = time.monotonic()
        metrics.PHASE_OFFSETS.observe(sent - started)
        metrics.PHASE_COMMIT.observe(done - sent)
        metrics.TXN_COMMIT.observe(done - started)
        now_ms = time.time() * 1000
        for m in records:
            _, ts = m.timestamp()
            if ts > 0:
                metrics.WRITER_LATENCY.observe(max(0.0, now_ms - ts) / 1000)

    def _committed(self, lane: int, offsets: dict[int, int]) -> None:
        """Bookkeeping of a committed transaction, on the main thread."""
        self._open.discard(lane)
        self._replacements = 0
        for p in offsets:
            state = self.partitions.get(p)
            if state is not None:  # else revoked or lost since
                state.rejections.committed()

    def _settle(self) -> None:
        """Waits for the transaction committing on the commit thread; raises its failure."""
        committing = self._committing
        if committing is None:
            return
        failure = committing.failure()
        if failure is None:
            self._committing = None
            self._committed(committing.lane, committing.txn.offsets)
            return
        del committing  # kept in self._committing: _recover reads its failure again
        try:
            raise failure
        finally:
            del failure  # else this frame holds the error whose traceback holds the frame

    def _settle_quietly(self) -> tuple[KafkaException, _Committing] | None:
        """:meth:`_settle` for callbacks and shutdown: a failure is returned, not raised."""
        committing = self._committing
        failure = committing.failure() if committing is not None else None
        if failure is None:
            self._settle()
            return None
        assert committing is not None
        self._committing = None
        return failure, committing

    def _settle_or_recover(self) -> None:
        committing = self._committing
        failure = committing.failure() if committing is not None else None
        if failure is None:
            self._settle()
            return
        assert committing is not None
        lane = committing.lane
        del committing  # it holds its partitions' states, which the recovery drops
        self._recover(failure, lane)

    def _abort_quietly(self) -> None:
        self._settle_quietly()
        for lane in sorted(self._open):
            try:
                with self._watch("abort_transaction", _KAFKA_TIMEOUT_S):
                    self._producers[lane].abort_transaction(_KAFKA_TIMEOUT_S)
                self._open.discard(lane)
            except KafkaException as exc:
                log.error("abort failed: %s", exc)

    def _recover(self, exc: KafkaException, lane: int) -> bool:
        """End the failed transactions, then either produce their records again or trust
        nothing in memory: restore every owned partition from the log and rewind the commands
        to the committed offsets. Returns whether it rewound.

        ``lane`` is the producer whose transaction was open when ``exc`` was raised; ``exc`` may
        also be the failure of the transaction committing on the other producer. That one is
        waited for first: if it committed, the restore reads it back.

        A transaction refused only because the group's generation moved on (a writer joined
        or left while it committed; every rebalance does it to some transaction in flight) is
        produced again, records and offsets, with the new generation: what was validated
        still holds, since nobody else writes the partitions this writer still owns. Records
        of partitions it no longer owns are dropped; their next owner serves those commands
        from the committed offsets.

        A fenced producer (see :func:`fenced`) stops the writer. Any other fatal producer
        error — an abort failing with INVALID_TXN_STATE while a killed broker's transaction
        coordinator moves, or our own transaction aborted by the coordinator for running past
        its timeout — gets a new producer with the same transactional id: its
        ``init_transactions`` ends whatever transaction the old one left and bumps the epoch,
        so the old one is fenced for good and the restore below reads a settled log. Group
        fencing (KIP-447) is untouched by this: offsets still go with the consumer's group
        generation, so a writer that lost its partitions meanwhile publishes nothing."""
        assert self._consumer is not None
        failures: dict[int, KafkaException] = {}
        failed: list[_Transaction] = []  # in commit order
        committing, self._committing = self._committing, None
        if committing is not None:
            commit_failure = committing.failure()
            if commit_failure is None:  # committed: the restore below reads it back
                self._committed(committing.lane, committing.txn.offsets)
            else:
                failures[committing.lane] = commit_failure
                failed.append(committing.txn)
        if not any(f is exc for f in failures.values()):
            failures[lane] = exc
        building, self._building = self._building, None
        if building is not None:
            failed.append(building)  # it cannot commit without the one before it
        metrics.TXN_ABORTS.inc()
        for failure in failures.values():
            err: KafkaError = failure.args[0]
            if fenced(err, shared_id=self._shared_id):
                log.error("transaction failed: fenced (%s)", err)
                raise WriterFencedError(f"writer {self.transactional_id}: {err.str()}") from failure
        for open_lane in sorted(self._open | failures.keys()):
            lane_failure = failures.get(open_lane)
            self._end_transaction(open_lane, lane_failure.args[0] if lane_failure else None)
        if all(_stale_generation(f.args[0]) for f in failures.values()) and self._produce_again(
            failed
        ):
            return False
        owned = [TopicPartition(self.topics.commands, p) for p in self.partitions]
        self.partitions.clear()
        # The failed transactions hold their partitions' states: dropped first, the states
        # are freed now and the sweep need not walk them.
        del failed, building, committing
        self._sweep_frozen_heap()
        if not owned:
            return True
        for tp in self._restore(owned):
            try:
                self._consumer.seek(tp)
            except KafkaException as seek_exc:
                if any(a.partition == tp.partition for a in self._consumer.assignment()):
                    # Still ours but not rewound: serving on would skip the aborted commands.
                    raise WriterFencedError(
                        f"writer {self.transactional_id}: cannot rewind partition "
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
        return True

    def _sweep_frozen_heap(self) -> None:
        """Frozen reference cycles are never freed (``gc_freeze``, see :meth:`run`), so the
        writer makes none on purpose, and sweeps for any it made by mistake here, where the
        sweep is cheap: a recovery has just dropped every partition's state, which was most of
        the heap."""
        if not self.settings.gc_freeze:
            return
        started = time.monotonic()
        gc.unfreeze()
        found = gc.collect()
        metrics.GC_CYCLIC_GARBAGE.inc(found)
        log.info(
            "swept the heap in %.0f ms: %d unreachable objects",
            (time.monotonic() - started) * 1000,
            found,
        )

    def _produce_again(self, failed: list[_Transaction]) -> bool:
        """One new transaction with the records and offsets of ``failed`` (aborted, in commit
        order) that belong to partitions this writer still serves from the state they were
        applied to, sent with the group's current generation. False if it could not commit:
        the caller restores instead."""
        assert self._consumer is not None
        owned = still_served(failed, self.partitions)
        offsets: dict[int, int] = {}
        for txn in failed:
            offsets.update((p, o) for p, o in txn.offsets.items() if p in owned)
        if not offsets:
            return True  # none of it is this writer's any more: the next owners serve it
        records = [
            txn.journal[i : i + _FIELDS]
            for txn in failed
            for i in range(0, len(txn.journal), _FIELDS)
            if txn.journal[i] in owned
        ]
        lane = self._turn
        for attempt in range(3):
            group = self._consumer.consumer_group_metadata()
            if unfenced(group):
                return False
            producer = self._producers[lane]
            try:
                with self._watch("begin_transaction", _KAFKA_TIMEOUT_S):
                    producer.begin_transaction()
                self._open.add(lane)
                for _, topic, value, key, partition, kind, request_id in records:
                    producer.produce(
                        topic,
                        value=value,
                        key=key,
                        partition=partition,
                        headers=_record_headers(kind, request_id),
                    )
                self._send_offsets(producer, offsets, group)
                with self._watch("commit_transaction", _KAFKA_TIMEOUT_S):
                    producer.commit_transaction(_KAFKA_TIMEOUT_S)
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if fenced(err, shared_id=self._shared_id):
                    raise WriterFencedError(f"writer {self.transactional_id}: {err.str()}") from exc
                self._end_transaction(lane, err)
                if not _stale_generation(err) or attempt == 2:
                    return False
                time.sleep(0.05 * (attempt + 1))  # the consumer is still joining the new one
                continue
            self._open.discard(lane)
            for txn in failed:
                self._committed(txn.lane, txn.offsets)
            metrics.TXN_PRODUCED_AGAIN.inc()
            log.info(
                "produced %d records of %d aborted transaction(s) again for partitions %s, "
                "after the group's generation moved",
                len(records),
                len(failed),
                sorted(offsets),
            )
            return True
        return False

    def _end_transaction(self, lane: int, err: KafkaError | None) -> None:
        """Ends the lane's failed (``err``) or abandoned transaction: aborted, or the producer
        replaced when it cannot abort."""
        if err is not None and err.fatal():
            log.warning("transaction failed fatally: %s", err)
            self._replace_producer(lane, err)
            return
        if err is not None and err.code() == KafkaError._TIMED_OUT:
            # The coordinator did not answer in time (it is moving, or gone): by the time it
            # does, it has often aborted the transaction for its own timeout, and an abort
            # then blocks and fails fatally with INVALID_TXN_STATE (librdkafka #3297; 6 s in
            # the broker-kill runs). A new producer's init_transactions ends the transaction
            # either way, as soon as a coordinator answers.
            log.warning("transaction timed out: %s", err)
            self._replace_producer(lane, err)
            return
        if err is not None:
            log.warning("transaction aborted: %s", err)
        try:
            with self._watch("abort_transaction", _KAFKA_TIMEOUT_S):
                self._producers[lane].abort_transaction(_KAFKA_TIMEOUT_S)
            self._open.discard(lane)
        except KafkaException as abort_exc:
            abort_err: KafkaError = abort_exc.args[0]
            if fenced(abort_err, shared_id=self._shared_id):
                raise WriterFencedError(
                    f"writer {self.transactional_id}: abort failed: {abort_err.str()}"
                ) from abort_exc
            log.warning("abort failed: %s", abort_err)
            self._replace_producer(lane, abort_err)

    def _replace_producer(self, lane: int, cause: KafkaError) -> None:
        """A new producer with the lane's transactional id, in place of one that cannot go
        on. Partition state is dropped by the caller and restored from the log."""
        self._replacements += 1
        if self._replacements > _MAX_REPLACEMENTS:
            raise WriterFencedError(
                f"writer {self.transactional_id}: {_MAX_REPLACEMENTS} new producers in a row "
                f"failed before a transaction committed; last: {cause.str()}"
            )
        old = self._producers[lane]
        self._open.discard(lane)
        try:
            # Nothing of the failed transaction may still go out (the new producer's epoch
            # fences it anyway); a producer in a fatal state may refuse even this.
            old.purge(blocking=False)
        except KafkaException as exc:
            log.info("purging the old producer: %s", exc.args[0])
        metrics.PRODUCER_REPLACEMENTS.inc()
        deadline = time.monotonic() + self.settings.max_poll_interval_ms / 2000
        backoff = _BACKOFF_FIRST_S
        while True:
            producer = self._new_producer(lane)
            try:
                with self._watch("init_transactions", _KAFKA_TIMEOUT_S):
                    producer.init_transactions(_KAFKA_TIMEOUT_S)
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if (
                    fenced(err, shared_id=self._shared_id)
                    or self._stop.is_set()
                    or time.monotonic() + backoff > deadline
                ):
                    raise WriterFencedError(
                        f"writer {self._lane_id(lane)}: no new producer: {err.str()}"
                    ) from exc
                log.warning(
                    "a new producer could not start (%s); trying again in %.1fs", err, backoff
                )
                del producer
                time.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            self._producers[lane] = producer
            if self._producer is old:
                self._producer = producer
            del old
            log.warning(
                "new producer for %s (the old one failed: %s); restoring from the log",
                self._lane_id(lane),
                cause,
            )
            return

    # -- one command ----------------------------------------------------------------------

    def _handle(self, m: Message, state: PartitionState) -> None:
        assert self._producer is not None
        value = m.value() or b""
        try:
            command, frames = decode_command_frames(value)
        except SessionError as exc:
            self._dead_letter(m, exc)
            return
        outcome = self._decide(m, command, state, len(value))
        self._maybe_stop(command)
        sid = command.session_id
        values: list[bytes] = []
        if outcome.new:
            session_state = state.sessions[sid]
            if frames is not None and session_state.prefix is None:
                session_state.prefix = event_prefix(sid)
            values = self._event_values(command, frames, outcome, session_state.prefix)
            too_big = [
                (ev, len(v))
                for ev, v in zip(outcome.events, values, strict=True)
                if len(v) > self.limits.max_event_bytes
            ]
            if too_big:
                state.undo(command, outcome)
                ev, size = too_big[0]
                values = []
                too_large = PayloadTooLargeError(
                    f"request {command.request_id!r}: event {ev.type} would be {size} "
                    f"bytes, the limit is {self.limits.max_event_bytes}",
                    code="EVENT_TOO_LARGE",
                )
                outcome = Outcome(error=too_large)
                state.rejections.add(sid, command.request_id, too_large)
            else:
                session_state.values.extend(values)
                produce, events, key = self._producer.produce, self.topics.events, sid.encode()
                note = self._journal().extend
                p = state.partition
                request_id = command.request_id.encode()
                rid = (HEADER_REQUEST, request_id)
                for ev, v in zip(outcome.events, values, strict=True):
                    note((p, events, v, key, p, ev.type, request_id))
                    headers: _Headers = [*_event_headers(ev.type), rid]
                    produce(events, value=v, key=key, partition=p, headers=headers)
                self._maybe_snapshot(state, sid)
        elif outcome.error is None and outcome.events:  # a retry, answered from the log
            first = outcome.events[0].seq
            values = state.sessions[sid].event_values(first, first + len(outcome.events))
        self._reply(state.partition, command, outcome, values)

    @staticmethod
    def _event_values(
        command: AppendCommand,
        frames: tuple[DraftFrame, ...] | None,
        outcome: Outcome,
        prefix: bytes | None = None,
    ) -> list[bytes]:
        """The events' topic values: assembled from the command's own bytes when it came in
        the current schema (see ``schemas.frames``), else encoded from the values.
        ``prefix``: the session's ``event_prefix``, if the caller keeps it."""
        sid = command.session_id
        if frames is not None:
            prefix = prefix or event_prefix(sid)
            return [
                event_value(prefix, f, ev.seq, ev.time)
                for f, ev in zip(frames, outcome.events, strict=True)
            ]
        return [
            encode_event(event_wire(d, ev), sid)
            for d, ev in zip(command.events, outcome.events, strict=True)
        ]

    def _decide(
        self, m: Message, command: AppendCommand, state: PartitionState, size: int
    ) -> Outcome:
        if m.key() != command.session_id.encode():
            return Outcome(
                error=MalformedCommandError(
                    f"request {command.request_id!r}: record key {m.key()!r} is not the "
                    f"session id {command.session_id!r}"
                )
            )
        home = self._partition_of(command.session_id, self._partition_count)
        if home != m.partition():
            return Outcome(
                error=WrongPartitionError(
                    f"request {command.request_id!r}: session {command.session_id!r} lives on "
                    f"partition {home}, the command came on {m.partition()}; produce commands "
                    "with Kafka's default (murmur2) partitioner"
                )
            )
        if self._tenancy.enabled:
            denied = self._tenancy.check(
                m.headers(), command.request_id, command.session_id, m.value() or b""
            )
            if denied is not None:
                return Outcome(error=denied)
        # Checked after the tenant: a rejection is only ever repeated to the one allowed to
        # write the session, and only rejections that depend on the session are remembered
        # (the ones above depend on who sent the command, or where, and recur on a retry).
        remembered = state.rejections.get(command.session_id, command.request_id)
        if remembered is not None:
            return Outcome(error=remembered, repeated=True)
        outcome = state.apply(command, size, self.limits)
        if outcome.error is not None and command.session_id not in state.broken:
            state.rejections.add(command.session_id, command.request_id, outcome.error)
        return outcome

    def _journal(self) -> list[Any]:
        assert self._building is not None
        return self._building.journal

    def _produce(
        self,
        serves: int,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        kind: str | _Headers,
        request_id: bytes | None = None,
    ) -> None:
        """Produce a record into the open transaction, noted in its journal; ``serves``: the
        commands partition it belongs to; ``kind`` and ``request_id``: its headers (see
        :func:`_record_headers`)."""
        assert self._producer is not None
        self._journal().extend((serves, topic, value, key, partition, kind, request_id))
        self._producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=_record_headers(kind, request_id),
        )

    def _stage_rejections(self, state: PartitionState) -> None:
        """The batch's rejections into the transaction, so a retry gets them after a restore
        too; the memory keeps them once the transaction commits."""
        for key, slot in state.rejections.stage():
            self._produce(
                state.partition,
                self.topics.snapshots,
                encode_snapshot(
                    WriterSnapshot(f"rejected/{state.partition}", (), state=slot.state())
                ),
                key,
                state.partition,
                _SNAPSHOT,
            )

    def _reply(
        self, serves: int, command: AppendCommand, outcome: Outcome, values: list[bytes]
    ) -> None:
        rid, cid, sid = command.request_id, command.client_id, command.session_id
        if outcome.error is not None:
            value = encode_reply(AppendReply.rejected(rid, cid, sid, outcome.error))
            first = command.events[0].get("type", "?") if command.events else "?"
            if outcome.repeated:  # the rejection was counted when it was made
                metrics.appends(str(first), "duplicate").inc()
            else:
                metrics.REJECTED.labels(type(outcome.error).__name__, outcome.error.code).inc()
                metrics.appends(str(first), "rejected").inc()
        else:
            value = committed_reply(rid, cid, sid, values)
            result = "committed" if outcome.new else "duplicate"
            events = outcome.events
            first_type = events[0].type
            if all(ev.type == first_type for ev in events):
                metrics.appends(first_type, result).inc(len(events))
            else:
                for ev in events:
                    metrics.appends(ev.type, result).inc()
        self._produce(
            serves,
            self.topics.replies,
            value,
            cid.encode(),
            self._partition_of(cid, self._reply_partitions),
            _REPLY,
            rid.encode(),
        )

    def _maybe_snapshot(self, state: PartitionState, session_id: str) -> None:
        every = self.settings.snapshot_every
        if every and state.sessions[session_id].events_since_snapshot >= every:
            self._snapshot(state, session_id)

    def _snapshot(self, state: PartitionState, session_id: str) -> int | None:
        """Produce the session's snapshot; its size, or None when it is too large to keep."""
        assert self._producer is not None
        session_state = state.sessions[session_id]
        value = session_state.snapshot()
        if len(value) > self.settings.max_snapshot_bytes:
            # Snapshots only speed restores up; the events topic alone restores correctly.
            # Try again N events later, not on every append: encoding the whole session each
            # time would make appends cost the session's length.
            session_state.events_since_snapshot = 0
            metrics.SNAPSHOTS.labels("skipped").inc()
            return None
        self._produce(
            state.partition,
            self.topics.snapshots,
            value,
            session_id.encode(),
            state.partition,
            _SNAPSHOT,
        )
        session_state.events_since_snapshot = 0
        state.dirty.discard(session_id)
        metrics.SNAPSHOTS.labels("written").inc()
        return len(value)

    def _maybe_checkpoint(self, state: PartitionState) -> None:
        """Record an events offset X below which snapshots cover everything: a restore reads the
        events topic from X on. Every ``checkpoint_every`` events X is taken (the partition's
        end now) together with the sessions that have events no snapshot covers; those are
        snapshotted a few per batch (``CHECKPOINT_BYTES_PER_BATCH``) rather than all in one
        transaction, which would stall every command behind megabytes of snapshots; once the
        last is written, so is the checkpoint. Called after the batch's commands, so this
        transaction's own events are covered by what it snapshots."""
        if state.checkpoint is None:
            every = self.settings.checkpoint_every
            if not every or state.events_since_checkpoint < every:
                return
            if state.broken:
                # A session whose log does not restore has no snapshot: past a checkpoint, a
                # restore would not see its events at all and take it for a new session.
                return
            assert self._probe is not None
            offset = high_watermark(self._probe, self.topics.events, state.partition)
            # Popped from the end: sorted in reverse, so sessions go in id order.
            state.checkpoint = (offset, sorted(state.dirty, reverse=True))
            state.events_since_checkpoint = 0
        offset, uncovered = state.checkpoint
        budget = CHECKPOINT_BYTES_PER_BATCH
        while uncovered and budget > 0:
            session_id = uncovered.pop()
            if session_id not in state.dirty:
                continue  # snapshotted since, on its own schedule
            size = self._snapshot(state, session_id)
            if size is None:
                state.checkpoint = None  # a session too large to snapshot: no promise
                return
            budget -= size
        if uncovered:
            return
        state.checkpoint = None
        value = encode_snapshot(
            WriterSnapshot(f"checkpoint/{state.partition}", (), state={"eventsOffset": offset})
        )
        self._produce(
            state.partition,
            self.topics.snapshots,
            value,
            CHECKPOINT_KEY,
            state.partition,
            _SNAPSHOT,
        )
        metrics.SNAPSHOTS.labels("checkpoint").inc()

    def _dead_letter(self, m: Message, exc: SessionError) -> None:
        assert self._producer is not None
        log.warning(
            "undecodable command at %s[%s]@%s: %s",
            m.topic(),
            m.partition(),
            m.offset(),
            exc,
            extra={
                "partition": m.partition(),
                "session": (m.key() or b"").decode("utf-8", "replace"),
            },
        )
        self._produce(
            m.partition(),  # type: ignore[arg-type]
            self.topics.dlq,
            m.value(),
            m.key(),
            -1,  # the partitioner's choice, by key
            dead_letter_headers(
                "writer",
                exc,
                source_of(m.topic() or "", m.partition() or 0, m.offset() or 0),
                m.headers(),
            ),
        )
        metrics.DLQ.inc()

    def _maybe_stop(self, command: AppendCommand) -> None:
        kind, _, request_id = self._failpoint.partition(":")
        if request_id != command.request_id:
            return
        if kind == "stop-before-produce":
            self._failpoint = ""
            self._failpoint_stop(f"producing request {request_id}")
        elif kind == "stop-before-commit":
            # After the batch's offsets went to its transaction: they stay pending.
            self._failpoint = ""
            self._stop_before_commit = True

    @staticmethod
    def _failpoint_stop(before: str) -> None:
        log.warning("failpoint: stopping before %s", before)
        os.kill(os.getpid(), signal.SIGSTOP)
        log.warning("failpoint: resumed")


_REPLY_HEADERS = tuple(record_headers(APPEND_REPLY))
_SNAPSHOT_HEADERS = tuple(record_headers(WRITER_SNAPSHOT))


@functools.lru_cache(maxsize=1024)
def _event_headers(event_type: str) -> tuple[tuple[str, bytes], ...]:
    return tuple(event_headers(event_type))


def _record_headers(kind: str | _Headers, request_id: bytes | None) -> _Headers:
    """A record's headers from what the journal keeps of them: an event's type, _REPLY or
    _SNAPSHOT, and the request id; any other headers are kept as they are."""
    if not isinstance(kind, str):
        return kind
    if kind == _SNAPSHOT:
        return [*_SNAPSHOT_HEADERS]
    base = _REPLY_HEADERS if kind == _REPLY else _event_headers(kind)
    return [*base, (HEADER_REQUEST, request_id)]


# The transactional id's epoch moved past this producer: a newer producer with the same id
# took it over, or the coordinator aborted our transaction for running past
# transaction.timeout.ms (e.g. while a broker was down), which bumps the epoch too.
_EPOCH_BUMPED = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FATAL,  # a fatal error whose cause was not passed on: assume the worst
    }
)
_NOT_ALLOWED = frozenset(
    {KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}
)


def fenced(err: KafkaError, *, shared_id: bool) -> bool:
    """Whether a producer error must stop the writer. A new producer cures every fatal error
    except these: being refused the id, and a moved epoch when another process may hold the
    id (a configured transactional id) — taking it back would fence the newer owner. An id of
    this process's own (the default) nobody else has, so a moved epoch there only means the
    coordinator ended our timed-out transaction."""
    code = err.code()
    return code in _NOT_ALLOWED or (shared_id and code in _EPOCH_BUMPED)


def still_served(failed: Sequence[_Transaction], partitions: dict[int, PartitionState]) -> set[int]:
    """The partitions of ``failed`` that are still served from the very state their commands
    were applied to: only their records may be produced again. A partition revoked, lost or
    restored since (a new state, read from the log without them) is left to the log."""
    touched = {p for txn in failed for p in txn.offsets}
    return {
        p
        for p in touched
        if all(partitions.get(p) is txn.states[p] for txn in failed if p in txn.states)
    }


# The group coordinator refused the transaction's offsets only because the group's generation
# moved on since they were sent (a rebalance began or completed meanwhile).
_GENERATION_MOVED = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS})


def _stale_generation(err: KafkaError) -> bool:
    return err.code() in _GENERATION_MOVED and not err.fatal()


def unfenced(group_metadata: object) -> bool:
    """True for group metadata the broker would not check: a member that lost its membership
    (generation -1, no member id) looks like a pre-KIP-447 producer, whose transactional
    offsets the coordinator accepts as they are. Reads librdkafka's serialized form
    ("CGMDv2:", native int32 generation, group id NUL, member id NUL, ...)."""
    if not (isinstance(group_metadata, bytes) and group_metadata.startswith(b"CGMDv2:")):
        return False  # a form we do not know: the broker's own checks still apply
    generation = int.from_bytes(group_metadata[7:11], sys.byteorder, signed=True)
    fields = group_metadata[11:].split(b"\0")
    member = fields[1] if len(fields) > 1 else b""
    return generation < 0 or not member
