"""The consumer loop: poll, two batches in hand, commit, retry.

Two batches are in hand on a busy topic: batch N+1 is planned and submitted while Redis
applies batch N; then N's replies are read and settled and N's offsets committed. Offsets are
committed only after Redis acknowledged the batch (at-least-once delivery; the apply script
makes it effectively once). A Redis or Kafka error drops both batches uncommitted and applies
them again, in order, one at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from projectors import metrics
from projectors.batch_io import Pending
from projectors.link import WritesRefusedError
from projectors.records import Record, decode
from projectors.runtime.batches import Plan, Planner
from projectors.runtime.poison import PoisonRecords
from projectors.runtime.rebuilds import Rebuilds
from projectors.runtime.sessions import SessionStore
from projectors.runtime.watch import RedisWatch
from projectors.scripts import load_all
from projectors.settings import ProjectorSettings
from servicekit.gc_tuning import young_gc_threshold
from servicekit.health import Health
from servicekit.kafka_clients import Membership
from servicekit.partition_reader import PartitionReadError
from servicekit.watchdog import CallWatchdog

S = TypeVar("S")
log = logging.getLogger("projectors")

# A batch that meets one of these is applied again from the start, with the one before it:
# nothing of either was committed, and applying again is harmless. Writes Redis refused for a
# state of its own (memory full, …) are no gap in a session: a rebuild would be refused too.
_RETRYABLE = (
    redis.ConnectionError,
    redis.TimeoutError,
    WritesRefusedError,
    KafkaException,
    PartitionReadError,
)
# A synchronous offset commit has no timeout: it waits for the group coordinator. Past this
# and the grace, the watchdog ends the process rather than let it wait for ever.
_COMMIT_BOUND_S = 30.0


@dataclass
class Batch:
    """A batch between its submission to Redis and its settlement (replies read, gaps rebuilt,
    dead letters flushed); its offsets are committed only after that."""

    messages: Sequence[Message]
    sessions: dict[str, int]  # session → its partition
    plan: Plan
    pending: Pending
    started: float


class Loop(Generic[S]):
    def __init__(
        self,
        name: str,
        topic: str,
        settings: ProjectorSettings,
        store: SessionStore[S],
        planner: Planner[S],
        poison: PoisonRecords,
        rebuilds: Rebuilds[S],
        watch: RedisWatch,
        stats: Counter[str],
        health: Health,
    ) -> None:
        self.name = name
        self.topic = topic
        self.settings = settings
        self.store = store
        self.planner = planner
        self.poison = poison
        self.rebuilds = rebuilds
        self.watch = watch
        self.stats = stats
        self.health = health  # told of each round, and of each retry while Redis is away
        self.inflight: Batch | None = None  # submitted to Redis, not settled yet
        # Why the batch being retried failed, until one goes through: Redis may answer PING
        # and still refuse every write (a replica), which only this shows.
        self.writes_failing: str | None = None
        # The records of a batch that failed at a rebalance: they go again first.
        self._redo: list[Message] = []
        self._consumer: Consumer | None = None  # while run() runs
        self._published: Counter[str] = Counter()  # stats already counted in Prometheus
        # The offset last committed per partition, once this process committed one there.
        self._committed: dict[int, int] = {}
        self._watchdog = CallWatchdog(0)  # off outside run()

    @property
    def consumer(self) -> Consumer | None:
        """The consumer while :meth:`run` runs."""
        return self._consumer

    def run(self, consumer: Consumer, membership: Membership, stop: threading.Event) -> None:
        """Until ``stop``; the batch in hand is settled and committed before it returns."""
        self._consumer = consumer
        self._watchdog = CallWatchdog(self.settings.stuck_call_grace_s)
        try:
            with young_gc_threshold(self.settings.gc_threshold):
                while not stop.is_set():
                    self.health.beat()
                    if self.watch.due():
                        self._step(consumer, [], stop)  # settle what is in flight first
                        self.watch.housekeeping(consumer)
                    # Records already fetched are taken at once while a batch is in flight:
                    # they are planned while Redis applies it. Otherwise wait for the next.
                    batch = self._next_batch(consumer, membership, wait=self.inflight is None)
                    self._step(consumer, [m for m in batch if self._usable(m)], stop)
                    if not batch and self.inflight is None:
                        self._commit_past_markers(consumer)
                self._finish_inflight(consumer, wait=True)
        finally:
            self.inflight = None
            self._consumer = None
            self._watchdog.close()
            self._watchdog = CallWatchdog(0)

    def process(self, messages: Sequence[Message]) -> None:
        """Apply one batch from start to finish (nothing else in flight)."""
        self.settle(self.submit(messages))

    def submit(self, messages: Sequence[Message]) -> Batch:
        """Decode, plan against the cached states and submit the batch to Redis."""
        started = time.perf_counter()
        items = [
            decode(m.key(), m.value(), m.partition() or 0, m.offset() or 0, m.headers())
            for m in messages
        ]
        sessions = {i.session_id: i.partition for i in items if type(i) is Record}
        self.store.load(sessions, self.inflight)
        plan = self.planner.plan(items)
        self.poison.deliver(plan.dead)
        return Batch(messages, sessions, plan, self.store.link.submit(plan.commands), started)

    def settle(self, batch: Batch) -> None:
        """Read the batch's replies and settle them: what Redis refused is counted, rebuilt or
        blocked; dead letters are delivered. After this its offsets may be committed."""
        plan = batch.plan
        results = batch.pending.result()
        if any(isinstance(r, redis.exceptions.NoScriptError) for r in results):
            # Redis restarted: nothing of this batch ran. Load the scripts and send it again;
            # a batch submitted after it meets the same and is sent again after it.
            load_all(self.store.client)
            results = self.store.link.round_trip(plan.commands)
        self.planner.settle(plan.queued, results, plan.rebuild)
        if plan.rebuild:
            self.rebuilds.rebuild(plan.rebuild, cause="gap")
        self.poison.flush()
        self.store.evict()
        metrics.BATCH_SECONDS.labels(self.name).observe(time.perf_counter() - batch.started)
        for result in metrics.RESULTS:
            n = self.stats[result] - self._published[result]
            if n:
                metrics.EVENTS.labels(self.name, result).inc(n)
                self._published[result] = self.stats[result]

    def commit(self, consumer: Consumer, messages: Sequence[Message], wait: bool = False) -> None:
        """Commit the offsets after ``messages`` (applied in Redis by now). Between batches
        the commit is not waited for: it only says where a next owner resumes, and the apply
        is idempotent, so a commit that fails or lands late costs a few events applied twice
        (skipped as duplicates), never a wrong read model; its result comes to
        :meth:`on_commit`. Before partitions go (``wait``) it is waited for, so their next
        owner starts where this one stopped."""
        ends: dict[int, int] = {}
        for m in messages:
            ends[m.partition() or 0] = max(ends.get(m.partition() or 0, -1), m.offset() or 0)
        offsets = [TopicPartition(self.topic, p, o + 1) for p, o in ends.items()]
        for p, o in ends.items():
            self._committed[p] = o + 1
        try:
            if not wait:
                consumer.commit(offsets=offsets, asynchronous=True)
                return
            with self._watchdog.watch("commit", _COMMIT_BOUND_S):
                consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:  # a rebalance in between: the next owner re-applies, harmlessly
            self._commit_failed(exc)

    def _commit_past_markers(self, consumer: Consumer) -> None:
        """Idle, with every record taken applied and committed: commit the consumer's
        position where it passed what is not a record. A transaction's commit marker takes an
        offset after its last record, so a commit of last + 1 left Kafka's own lag reading
        (``kafka-consumer-groups``, any lag alert) at 1 for good on every partition written."""
        try:
            positions = consumer.position(consumer.assignment())
        except KafkaException:
            return  # a rebalance under way: the next idle poll tries again
        # A partition taken over from another owner is committed once at its position (the
        # previous owner may have stopped before a marker); an unknown position is negative.
        ahead = [tp for tp in positions if tp.offset > self._committed.get(tp.partition, -1)]
        if not ahead:
            return
        for tp in ahead:
            self._committed[tp.partition] = tp.offset
        try:
            consumer.commit(offsets=ahead, asynchronous=True)
        except KafkaException as exc:
            self._commit_failed(exc)

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            self._commit_failed(err)

    def settle_before_rebalance(self) -> None:
        """Finish and commit the batch in flight while its partitions are still ours. If that
        fails it is not committed: whoever gets the partitions that go resumes from the last
        commit and applies their records again, harmlessly; the records of the partitions
        that stay go again here first (:meth:`_step`), since the consumer has moved past
        them and the next commit would pass them by."""
        assert self._consumer is not None
        try:
            self._finish_inflight(self._consumer, wait=True)
        except Exception as exc:  # raising here would surface from inside poll()
            log.warning("projector %s: batch in flight at a rebalance: %s", self.name, exc)
            if self.inflight is not None:
                self._redo += self.inflight.messages
            self.inflight = None
            self.store.reset()  # the link may hold unread replies, the cache be ahead of Redis

    def _next_batch(self, consumer: Consumer, membership: Membership, wait: bool) -> list[Message]:
        """Wait for one record, then take whatever else is already fetched: a quiet topic
        gets low latency, a busy one full batches."""
        if not wait:
            batch = consumer.consume(self.settings.batch_size, 0)
            membership.raise_pending()
            return batch
        first = consumer.poll(self.settings.poll_timeout_s)
        membership.raise_pending()
        if first is None:
            return []
        return [first, *consumer.consume(self.settings.batch_size - 1, 0)]

    def _usable(self, message: Message) -> bool:
        error = message.error()
        if error is None:
            return True
        if error.code() != KafkaError._PARTITION_EOF:
            log.warning("projector %s: consumer error %s", self.name, error)
        return False

    def _step(self, consumer: Consumer, messages: list[Message], stop: threading.Event) -> None:
        """Submit ``messages`` as the next batch (if any), then settle and commit the batch
        that was in flight: Redis applies one batch while Python plans the next."""
        if self._redo:
            messages = [*self._take_redo(consumer), *messages]
        try:
            batch = self.submit(messages) if messages else None
            self._finish_inflight(consumer)
            self.inflight = batch
        except _RETRYABLE as exc:
            # Nothing of the batch in flight nor of this one is committed: both go again, in
            # order, one at a time. The cache may be ahead of Redis, so forget it.
            redo = [*(self.inflight.messages if self.inflight else ()), *messages]
            self.inflight = None
            self.store.reset()
            if stop.is_set() or not redo:
                raise
            log.warning("projector %s: %s; retrying %d records", self.name, exc, len(redo))
            self._process_until_done(redo, stop)
            self.commit(consumer, redo)

    def _take_redo(self, consumer: Consumer) -> list[Message]:
        """The records of a batch that failed at a rebalance, of the partitions still ours
        (fetched before anything in hand now, so they go first)."""
        owned = {tp.partition for tp in consumer.assignment()}
        redo, self._redo = self._redo, []
        return [m for m in redo if m.partition() in owned]

    def _finish_inflight(self, consumer: Consumer, wait: bool = False) -> None:
        batch = self.inflight
        if batch is not None:
            self.settle(batch)
            self.inflight = None
            self.commit(consumer, batch.messages, wait)

    def _process_until_done(self, messages: list[Message], stop: threading.Event) -> None:
        delay = 0.1
        while True:
            try:
                self.process(messages)
                self.writes_failing = None
                return
            except _RETRYABLE as exc:
                self.writes_failing = f"{type(exc).__name__}: {exc}"
                self.health.beat()  # waiting for Redis is progress: a restart would not help
                self.store.reset()
                if stop.is_set():
                    raise
                log.warning("projector %s: %s; retrying the batch", self.name, exc)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _commit_failed(self, cause: object) -> None:
        self.stats["commit_failed"] += 1
        metrics.COMMIT_FAILURES.labels(self.name).inc()
        log.warning("projector %s: offset commit failed: %s", self.name, cause)
