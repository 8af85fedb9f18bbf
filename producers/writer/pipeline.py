"""The writer's transactions: the open one, and the one committing on the commit thread.

With commit overlap (``DSH_WRITER_OVERLAP_COMMITS``, the default) there are two producers,
*lanes* (:mod:`.lanes`), each with its own transactional id, that take turns: a batch is
built and produced on one lane while the transaction before it commits on the other. It is
produced once the previous one's records are acknowledged (so they stay first in every
partition), and committed only once the previous one has committed (so it is never visible
without it; if that one fails, this one is aborted with it). Without overlap: one producer,
one transaction at a time.

Each transaction keeps a journal of what it produced (:mod:`.journal`), so that a transaction
refused only because the group's generation moved can be produced again
(:meth:`Pipeline.produce_again`). What to do about a failure is decided by
:mod:`.recovery`; this module only carries transactions out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from producers.errors import WriterFencedError
from producers.writer import metrics, recovery
from producers.writer.failpoints import NONE, Failpoints
from producers.writer.journal import headers_of
from producers.writer.lanes import KAFKA_TIMEOUT_S, Lanes
from producers.writer.state import PartitionState
from producers.writer.transaction import Committing, Failure, Transaction, produce

log = logging.getLogger("dsh.writer")


class Pipeline:
    def __init__(
        self,
        lanes: Lanes,
        *,
        commands_topic: str,
        offsets_metadata: str,
        on_committed: Callable[[Mapping[int, int]], None],
        failpoints: Failpoints = NONE,
        inline_commit_max_commands: int = 0,
    ) -> None:
        self.lanes = lanes
        self.inline_commit_max_commands = inline_commit_max_commands
        self.writer_id = lanes.writer_id
        self.shared_id = lanes.shared_id
        self.commands_topic = commands_topic
        self.offsets_metadata = offsets_metadata  # names this writer with the offsets it sends
        self._watch = lanes.watch
        self._on_committed = on_committed
        self._failpoints = failpoints
        self.turn = 0  # the lane the next transaction is built on
        self.committing: Committing | None = None
        self.building: Transaction | None = None
        self._committer: ThreadPoolExecutor | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.lanes.start()
        if len(self.lanes) > 1:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="dsh-commit")

    def settle_last(self) -> None:
        """At shutdown, before the partitions go: the last commit ends, and so does the
        commit thread."""
        failure = self.settle_quietly()
        if failure is not None:
            log.warning("the last transaction did not commit: %s", failure[0])
        if self._committer is not None:
            self._committer.shutdown()

    def close(self) -> None:
        self.lanes.close()

    # -- one batch ------------------------------------------------------------------------

    def begin(self) -> Transaction:
        """A transaction on the lane whose turn it is; it is :attr:`building` until it is
        committed, handed to the commit thread, or failed."""
        lane = self.turn
        txn = self.building = Transaction(lane, self.lanes.begin(lane))
        return txn

    def abandon(self, txn: Transaction) -> None:
        """End a transaction that holds nothing (every command's partition went meanwhile)."""
        self.building = None
        self.lanes.abort(txn.lane)

    def send_offsets(self, producer: Producer, offsets: Mapping[int, int], group: object) -> None:
        """The commands' next offsets into the producer's transaction, with the group's metadata
        (KIP-447) and this writer's name (:mod:`.takeover`)."""
        with self._watch("send_offsets_to_transaction", KAFKA_TIMEOUT_S):
            self._failpoints.sending_offsets()
            producer.send_offsets_to_transaction(
                [
                    TopicPartition(self.commands_topic, p, o, metadata=self.offsets_metadata)
                    for p, o in offsets.items()
                ],
                group,
                KAFKA_TIMEOUT_S,
            )

    def finish(
        self, txn: Transaction, records: Sequence[Message], started: float, sent: float
    ) -> None:
        """Commit ``txn`` (its offsets are sent): now, or on the commit thread once its records
        are acknowledged and the transaction before it has settled."""
        self._failpoints.offsets_sent()
        if self.commit_done():
            self.settle()
        if self._committer is None or (
            self.committing is None and len(records) <= self.inline_commit_max_commands
        ):
            # Nothing commits meanwhile, and a batch this small has most likely no other
            # behind it to build: committed here, without the flush and the hand-over.
            self._commit(txn.producer, records, started, sent)
            self.building = None
            self._committed(txn.lane, txn.offsets)
            return
        # Acknowledged records of this transaction (or its doom, which the commit
        # reports) before the next transaction produces after them.
        with self._watch("flush", KAFKA_TIMEOUT_S):
            txn.producer.flush(KAFKA_TIMEOUT_S)
        flushed = time.monotonic()
        self.settle()
        metrics.PHASE_FLUSH.observe(flushed - sent)
        metrics.PHASE_PREVIOUS.observe(time.monotonic() - flushed)
        self.committing = Committing(
            txn, self._committer.submit(self._commit, txn.producer, records, started, sent)
        )
        self.building = None
        self.turn = (txn.lane + 1) % len(self.lanes)

    def _commit(
        self, producer: Producer, records: Sequence[Message], started: float, sent: float
    ) -> None:
        """Commits the producer's transaction (retrying what librdkafka says may be retried)
        and observes its metrics. Runs on the commit thread with overlap."""
        attempt = 0
        while True:
            try:
                with self._watch("commit_transaction", KAFKA_TIMEOUT_S):
                    producer.commit_transaction(KAFKA_TIMEOUT_S)
                break
            except KafkaException as exc:
                if not recovery.retry_commit(exc.args[0], attempt):
                    raise
                attempt += 1
        done = time.monotonic()
        metrics.PHASE_OFFSETS.observe(sent - started)
        metrics.PHASE_COMMIT.observe(done - sent)
        metrics.TXN_COMMIT.observe(done - started)
        now_ms = time.time() * 1000
        for m in records:
            _, ts = m.timestamp()
            if ts > 0:
                metrics.WRITER_LATENCY.observe(max(0.0, now_ms - ts) / 1000)

    def _committed(self, lane: int, offsets: Mapping[int, int]) -> None:
        """Bookkeeping of a committed transaction, on the main thread."""
        self.lanes.committed(lane)
        self._on_committed(offsets)

    # -- the transaction on the commit thread --------------------------------------------

    def commit_done(self) -> bool:
        return self.committing is not None and self.committing.done.done()

    def settle(self) -> None:
        """Waits for the transaction committing on the commit thread; raises its failure."""
        committing = self.committing
        if committing is None:
            return
        failure = committing.failure()
        if failure is None:
            self.committing = None
            self._committed(committing.lane, committing.txn.offsets)
            return
        del committing  # kept in self.committing: the recovery reads its failure again
        try:
            raise failure
        finally:
            del failure  # else this frame holds the error whose traceback holds the frame

    def settle_quietly(self) -> Failure | None:
        """:meth:`settle` for callbacks and shutdown: a failure is returned, not raised."""
        committing = self.committing
        failure = committing.failure() if committing is not None else None
        if failure is None:
            self.settle()
            return None
        assert committing is not None
        self.committing = None
        return failure, committing

    def abort_quietly(self) -> None:
        self.settle_quietly()
        self.lanes.abort_quietly()

    # -- failures -------------------------------------------------------------------------

    def failed(
        self, exc: KafkaException, lane: int
    ) -> tuple[dict[int, KafkaException], list[Transaction]]:
        """The failures by lane and the transactions that failed, in commit order, after
        ``exc`` on ``lane``. ``exc`` may also be the failure of the transaction committing on
        the other lane: that one is waited for first; if it committed, it is done with."""
        failures: dict[int, KafkaException] = {}
        failed: list[Transaction] = []
        committing, self.committing = self.committing, None
        if committing is not None:
            commit_failure = committing.failure()
            if commit_failure is None:  # committed: a restore reads it back
                self._committed(committing.lane, committing.txn.offsets)
            else:
                failures[committing.lane] = commit_failure
                failed.append(committing.txn)
        if not any(f is exc for f in failures.values()):
            failures[lane] = exc
        building, self.building = self.building, None
        if building is not None:
            failed.append(building)  # it cannot commit without the one before it
        return failures, failed

    def end_open(self, failures: Mapping[int, KafkaException]) -> None:
        """End every lane's open or failed transaction."""
        for lane in sorted(self.lanes.open | failures.keys()):
            failure = failures.get(lane)
            self.lanes.end(lane, failure.args[0] if failure else None)

    def produce_again(
        self,
        failed: Sequence[Transaction],
        partitions: Mapping[int, PartitionState],
        group_metadata: Callable[[], object],
    ) -> bool:
        """One new transaction with the records and offsets of ``failed`` (aborted, in commit
        order) that belong to partitions this writer still serves from the state they were
        applied to, sent with the group's current generation. False if it could not commit:
        the caller restores instead."""
        owned = recovery.still_served([txn.states for txn in failed], partitions)
        offsets: dict[int, int] = {}
        for txn in failed:
            offsets.update((p, o) for p, o in txn.offsets.items() if p in owned)
        if not offsets:
            return True  # none of it is this writer's any more: the next owners serve it
        records = [record for txn in failed for record in txn.records(owned)]
        lane = self.turn
        for attempt in range(3):
            group = group_metadata()
            if recovery.unfenced(group):
                return False
            try:
                producer = self.lanes.begin(lane)
                for _, topic, value, key, partition, kind, request_id in records:
                    produce(producer, topic, value, key, partition, headers_of(kind, request_id))
                self.send_offsets(producer, offsets, group)
                with self._watch("commit_transaction", KAFKA_TIMEOUT_S):
                    producer.commit_transaction(KAFKA_TIMEOUT_S)
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if recovery.fenced(err, shared_id=self.shared_id):
                    raise WriterFencedError(f"writer {self.writer_id}: {err.str()}") from exc
                self.lanes.end(lane, err)
                if not recovery.stale_generation(err) or attempt == 2:
                    return False
                time.sleep(0.05 * (attempt + 1))  # the consumer is still joining the new one
                continue
            self.lanes.committed(lane)
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
