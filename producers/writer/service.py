"""The single-writer service: owning commands partition p is the sole right to append to the
sessions that hash to p.

One loop, one thread: poll a batch of commands, decide each against the in-memory sessions
(:mod:`.commands`), produce events + replies (+ snapshots) in one transaction
(:mod:`.pipeline`), send the command offsets with the group metadata (KIP-447: a writer that
lost the partition is fenced there), commit. Rebalance callbacks run inside ``poll``, between
transactions, so a partition is never revoked mid-batch (:mod:`.ownership` restores what is
assigned). Any abort or doubt drops the in-memory state and restores it from the log — except
a transaction refused only because the group's generation moved on: its records are produced
again for the partitions still owned (:mod:`.recovery` decides which).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from dsh.projections import Interpreter
from producers.errors import WriterFencedError
from producers.tenancy import Tenancy
from producers.writer import metrics, recovery
from producers.writer.commands import CommandHandler, Placement
from producers.writer.failpoints import NONE, Failpoints
from producers.writer.lanes import KAFKA_TIMEOUT_S, Lanes
from producers.writer.ownership import Ownership
from producers.writer.pipeline import Pipeline
from producers.writer.recovery import Verdict
from producers.writer.settings import WriterSettings
from producers.writer.snapshots import Snapshots
from producers.writer.state import Limits, PartitionState, without_traceback
from producers.writer.takeover import offsets_metadata
from producers.writer.transaction import Failure, Transaction
from servicekit import kafka_clients
from servicekit.gc_tuning import observe_gc_pauses, young_gc_threshold
from servicekit.health import Health
from servicekit.interpreters import parse_interpreters
from servicekit.kafka_clients import Membership, partition_ids
from servicekit.settings import ConfigError, KafkaSettings
from servicekit.topics import Topics, partition_counts
from servicekit.watchdog import CallWatchdog

log = logging.getLogger("dsh.writer")

# Topics created a moment ago may not be in every broker's metadata yet.
_TOPICS_APPEAR_S = 5.0


class Writer:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: WriterSettings,
        *,
        interpreters: Mapping[str, Interpreter] | None = None,
        failpoints: Failpoints = NONE,
        health: Health | None = None,
    ) -> None:
        """``interpreters``: the message-projection interpreters of every session (default:
        those ``settings.projections`` names). ``health``: where the writer reports its loop's
        rounds and its readiness check ``partitions``."""
        self.kafka = kafka
        self.settings = settings
        self.topics = Topics.of(kafka)
        self.transactional_id = settings.transactional_id or f"dsh-writer-{uuid.uuid4().hex}"
        if interpreters is None:
            interpreters = parse_interpreters(settings.projections)
        self._stop = threading.Event()
        self._watchdog = CallWatchdog(settings.stuck_call_grace_s)
        self.failpoints = failpoints
        self.ownership = Ownership(
            kafka, settings, self.topics, self.transactional_id, interpreters, self._stop
        )
        lanes = Lanes(
            kafka, settings, self.transactional_id, watch=self._watchdog.watch, stop=self._stop
        )
        self.pipeline = Pipeline(
            lanes,
            commands_topic=self.topics.commands,
            offsets_metadata=offsets_metadata(
                self.transactional_id, 2 if settings.overlap_commits else 1
            ),
            on_committed=self._committed,
            failpoints=failpoints,
            inline_commit_max_commands=settings.inline_commit_max_commands,
        )
        self.snapshots = Snapshots(
            self.topics.snapshots,
            snapshot_every=settings.snapshot_every,
            checkpoint_every=settings.checkpoint_every,
            max_snapshot_bytes=settings.max_snapshot_bytes,
            events_end=self.ownership.events_end,
            snapshots_end=self.ownership.snapshots_end,
            # Take-outs read the topics with no poll and before the idle transaction's first
            # record: a quarter of the transaction timeout bounds both.
            take_out_seconds=settings.transaction_timeout_ms / 4000,
        )
        self.tenancy = Tenancy.parse(
            settings.tenant_prefixes, settings.tenant_keys.get_secret_value()
        )
        self.limits = Limits(settings.max_event_bytes, settings.max_command_bytes)
        self.handler: CommandHandler | None = None  # once the partition counts are known
        self._consumer: Consumer | None = None
        self._membership: Membership | None = None
        # A commit that failed in a rebalance callback, recovered once poll or consume returns.
        self._deferred: Failure | None = None
        self._last_batch_at = 0.0  # monotonic time the last batch was taken
        self.health = health or Health()
        self.health.check("partitions", self._not_serving)
        self._restoring: list[int] = []  # the partitions being restored now

    @property
    def partitions(self) -> dict[int, PartitionState]:
        return self.ownership.partitions

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
                    self.health.beat()
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
            KAFKA_TIMEOUT_S,
            appear_s=_TOPICS_APPEAR_S,
        )
        if counts[t.commands] != counts[t.events] or counts[t.snapshots] != counts[t.events]:
            raise ConfigError(
                f"commands, events and snapshots must have one partition count, got {counts}",
                code="PARTITION_MISMATCH",
            )
        placement = Placement(counts[t.commands], counts[t.replies])
        self.handler = CommandHandler(
            t, placement, self.limits, self.snapshots, self.tenancy, self.failpoints
        )
        self.pipeline.start()
        self.ownership.start()
        s = self.settings
        self._consumer = kafka_clients.group_consumer(
            self.kafka,
            s.group_id,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            # The group's member list is how a new owner tells a live writer from a dead one
            # (producers/writer/takeover.py).
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
            placement.partitions,
        )

    def _close(self) -> None:
        self.pipeline.settle_last()
        if self._consumer is not None:
            try:
                self._consumer.close()  # leaves the group now, so a successor needn't wait
            except KafkaException as exc:
                log.warning("closing the group consumer: %s", exc)
        self.pipeline.close()
        self.ownership.close()
        self._watchdog.close()
        log.info("writer %s stopped", self.transactional_id)

    # -- partitions (servicekit.kafka_clients.Membership calls these inside poll) ----------

    def owned(self) -> list[int]:
        return sorted(self.ownership.partitions)

    def assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        assert self._consumer is not None
        with self._restoring_now(partitions):
            return self.ownership.restore(self._consumer, partitions)

    @contextmanager
    def _restoring_now(self, partitions: list[TopicPartition]) -> Iterator[None]:
        """Not ready while it restores; alive, as the restore has a deadline of its own."""
        self._restoring = partition_ids(partitions)
        try:
            with self.health.busy():
                yield
        finally:
            self._restoring = []

    def _not_serving(self) -> str | None:
        """Readiness: a member of the group, with every partition it was assigned restored."""
        if self._restoring:
            return f"restoring partitions {self._restoring}"
        if self._membership is None or not self._membership.joined:
            return f"not assigned its partitions by group {self.settings.group_id} yet"
        return None

    def revoke(self, partitions: list[TopicPartition]) -> None:
        # The transaction still committing may hold commands of these partitions: it ends
        # before they go, so their next owner finds its offsets settled and need not wait.
        failure = self.pipeline.settle_quietly()
        if failure is not None and self._deferred is None:
            self._deferred = failure  # recovered right after poll or consume returns
        self.ownership.drop(partitions)

    def _committed(self, offsets: Mapping[int, int]) -> None:
        for p in offsets:
            state = self.ownership.partitions.get(p)
            if state is not None:  # else revoked or lost since
                state.rejections.committed()
                state.residency.committed()

    # -- batches --------------------------------------------------------------------------

    def _step(self) -> None:
        assert self._consumer is not None and self._membership is not None
        if self.pipeline.commit_done():
            self._settle_or_recover()
        first = self._consumer.poll(self.settings.poll_timeout_ms / 1000)
        if self._rewound_by_rebalance():
            return
        if first is None:
            self._idle()
            return
        # poll returns as soon as one record is there; drain what is already fetched without
        # waiting, so a quiet stream gets low latency and a busy one big batches. With a
        # minimum interval, a batch right after another waits out the rest of it for more.
        now = time.monotonic()
        wait = self._last_batch_at + self.settings.min_transaction_interval_ms / 1000 - now
        rest = self._consumer.consume(self.settings.batch_max_commands - 1, max(wait, 0))
        self._last_batch_at = time.monotonic() if wait > 0 else now
        if self._rewound_by_rebalance():  # consume serves rebalance callbacks as poll does
            return
        records = []
        taken_ms = time.time() * 1000
        for m in [first, *rest]:
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

    def _rewound_by_rebalance(self) -> bool:
        """Settle what a rebalance callback served inside poll or consume left: an assign's
        error is raised; the failure of the transaction that was committing when partitions
        were revoked is recovered now, before a batch is built on the state it left. Returns
        whether that recovery rewound every owned partition to its committed offset: then
        the records fetched before come again, in order, and must not be handled now."""
        assert self._membership is not None
        self._membership.raise_pending()
        if self._deferred is None:
            return False
        (exc, failed), self._deferred = self._deferred, None
        self.pipeline.committing, lane = failed, failed.lane  # _recover reads it again
        del failed  # it holds its partitions' states, which the recovery drops
        return self._recover(exc, lane)

    def _process(self, records: list[Message]) -> None:
        """One transaction for the batch, or several in a row once one reaches
        ``batch_max_bytes`` (:meth:`_transact`), each on the lane whose turn it is (see
        :mod:`.pipeline`)."""
        while records:
            lane = self.pipeline.turn
            left: list[Message] = []
            try:
                self._transact(records, left)
            except KafkaException as exc:
                # The traceback holds the batch's frames and, in them, its partitions' states,
                # which the recovery drops: let them go with it (see _sweep_frozen_heap).
                if self._recover(without_traceback(exc), lane):
                    return  # rewound: what the batch left is fetched again
                # Produced again: only the failure of a Kafka call after every command was
                # taken does that, so ``left`` is what the next transaction takes.
            except BaseException:
                # Not Kafka's doing: publish nothing of this batch, and let the process fail
                # loudly rather than serve from state the log may lack.
                self.pipeline.abort_quietly()
                raise
            records = left

    def _transact(self, records: list[Message], left: list[Message]) -> None:
        """One transaction of :meth:`_process`: built, produced, and committed or handed to
        the commit thread. It takes ``records`` until its own records reach
        ``batch_max_bytes`` (always one command), and puts the rest in ``left``."""
        assert self._consumer is not None and self.handler is not None
        handle, partitions = self.handler.handle, self.ownership.partitions
        max_bytes = self.settings.batch_max_bytes
        begun = time.monotonic()
        txn = self.pipeline.begin()
        offsets, states = txn.offsets, txn.states
        handled = 0
        for i, m in enumerate(records):
            p: int = m.partition()  # type: ignore[assignment]
            state = partitions.get(p)
            if state is None:
                continue  # revoked since it was fetched: its new owner serves it
            handle(m, state, txn)
            offsets[p] = m.offset() + 1  # type: ignore[operator]
            states[p] = state
            handled += 1
            if txn.size >= max_bytes:
                left += records[i + 1 :]
                records = records[: i + 1]
                break
        if not offsets:
            self.pipeline.abandon(txn)
            return
        for p, offset in offsets.items():
            partitions[p].commands_next = offset
            self.snapshots.after_batch(partitions[p], txn)
        started = time.monotonic()
        metrics.PHASE_VALIDATE.observe(started - begun)
        metrics.BATCH_COMMANDS.observe(handled)
        self._send_offsets_and_finish(txn, records, started)

    def _idle(self) -> None:
        """No command came within the poll timeout: a transaction of no command goes on with
        the checkpoints the partitions owe (:meth:`.Snapshots.owes_checkpoint`). It sends each
        partition's commands offset again, unchanged, so that a writer that has lost the
        partition is fenced there as a batch's transaction would be (KIP-447)."""
        partitions = self.ownership.partitions
        due = [
            p
            for p, state in partitions.items()
            if state.commands_next is not None and self.snapshots.owes_checkpoint(state)
        ]
        if not due:
            return
        lane = self.pipeline.turn
        try:
            try:
                # The evicted sessions to snapshot are read first, before the transaction
                # holds anything (Snapshots.take_out_owed).
                self.snapshots.take_out_owed(partitions[p] for p in due)
                txn = self.pipeline.begin()
                for p in due:
                    state = partitions[p]
                    assert state.commands_next is not None
                    txn.offsets[p] = state.commands_next
                    txn.states[p] = state
                    self.snapshots.when_idle(state, txn)
            finally:
                self.snapshots.release_taken()
            self._send_offsets_and_finish(txn, [], time.monotonic())
        except KafkaException as exc:
            self._recover(without_traceback(exc), lane)  # nothing fetched to take again
        except BaseException:
            self.pipeline.abort_quietly()
            raise

    def _send_offsets_and_finish(
        self, txn: Transaction, records: list[Message], started: float
    ) -> None:
        assert self._consumer is not None
        group = self._consumer.consumer_group_metadata()
        if recovery.unfenced(group):
            raise KafkaException(
                KafkaError(
                    KafkaError.UNKNOWN_MEMBER_ID,
                    "group membership lost before the offsets were sent",
                )
            )
        self.pipeline.send_offsets(txn.producer, txn.offsets, group)
        self.pipeline.finish(txn, records, started, time.monotonic())

    # -- recovery -------------------------------------------------------------------------

    def _settle_or_recover(self) -> None:
        committing = self.pipeline.committing
        failure = committing.failure() if committing is not None else None
        if failure is None:
            self.pipeline.settle()
            return
        assert committing is not None
        lane = committing.lane
        del committing  # it holds its partitions' states, which the recovery drops
        self._recover(failure, lane)

    def _recover(self, exc: KafkaException, lane: int) -> bool:
        """End the failed transactions, then either produce their records again or trust
        nothing in memory: restore every owned partition from the log and rewind the commands
        to the committed offsets. Returns whether it rewound.

        ``lane`` is the producer whose transaction was open when ``exc`` was raised; ``exc`` may
        also be the failure of the transaction committing on the other producer. That one is
        waited for first: if it committed, the restore reads it back.

        A fenced producer stops the writer (:func:`.recovery.verdict`). Any other fatal
        producer error gets a new producer with the same transactional id: its
        ``init_transactions`` ends whatever transaction the old one left and bumps the epoch,
        so the old one is fenced for good and the restore below reads a settled log. Group
        fencing (KIP-447) is untouched by this: offsets still go with the consumer's group
        generation, so a writer that lost its partitions meanwhile publishes nothing."""
        assert self._consumer is not None
        failures, failed = self.pipeline.failed(exc, lane)
        metrics.TXN_ABORTS.inc()
        errors = [failure.args[0] for failure in failures.values()]
        decided = recovery.verdict(errors, shared_id=self.pipeline.shared_id)
        if decided is Verdict.STOP:
            shared_id = self.pipeline.shared_id
            fenced = next(
                f for f in failures.values() if recovery.fenced(f.args[0], shared_id=shared_id)
            )
            log.error("transaction failed: fenced (%s)", fenced.args[0])
            raise WriterFencedError(
                f"writer {self.transactional_id}: {fenced.args[0].str()}"
            ) from fenced
        self.pipeline.end_open(failures)
        if decided is Verdict.PRODUCE_AGAIN and self.pipeline.produce_again(
            failed, self.ownership.partitions, self._consumer.consumer_group_metadata
        ):
            return False
        owned = self.ownership.release_all()
        # The failed transactions hold their partitions' states: dropped first, the states
        # are freed now and the sweep need not walk them.
        del failed, failures
        self._sweep_frozen_heap()
        if owned:
            with self._restoring_now(owned):
                self.ownership.rewind(self._consumer, owned)
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
