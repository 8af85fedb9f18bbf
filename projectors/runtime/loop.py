"""The consumer loop: poll, two batches in hand, commit, retry.

Two batches are in hand on a busy topic: batch N+1 is planned and submitted while Redis
applies batch N; then N's replies are read and settled and N's offsets committed. Offsets are
committed only after Redis acknowledged the batch (at-least-once delivery; the apply script
makes it effectively once). A Redis or Kafka error drops both batches uncommitted and applies
them again, in order, one at a time.

Redis replicates asynchronously: a failover may lose the last writes of sessions whose
offsets are already committed. A session that receives another event shows a gap; a quiet
one would not. So after a failed batch the first batch settled (everything planned before
the failure is in Redis again by then) asks Redis for the sessions the cache believed applied
(:meth:`.sessions.SessionStore.behind`) and rebuilds those it holds behind. They are written
down in Redis first (:mod:`.handover`), so that the partition's next owner finishes a mend cut
short by a revocation or the process's death: it reads them once assigned the partition.

A gap's rebuild scans its partition, which may take longer than Kafka's max.poll.interval.ms.
Meanwhile the partitions assigned are paused and the consumer is polled at each beat of the
scan, so the projector stays in its group. A partition revoked then is its next owner's: its
rebuild is abandoned, and no batch read before the revocation commits it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from projectors import metrics
from projectors.batch_io import Pending
from projectors.link import WritesRefusedError
from projectors.records import Record, decode
from projectors.runtime.batches import Plan, Planner
from projectors.runtime.handover import Handover
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
_REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, WritesRefusedError)
_RETRYABLE = (*_REDIS_ERRORS, KafkaException, PartitionReadError)
# A take-over of a failover's mend that failed (Redis or Kafka away) is tried again this much
# later, not at every round of a loop with nothing to apply.
_TAKE_OVER_RETRY_S = 2.0
# Handing on what a partition revoked while Redis was away left behind waits for Redis to come
# back: tried this often, so an outage is not a warning every round.
_PASS_ON_RETRY_S = 10.0
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
    serial: int  # the loop's revocations when its records were read (see Loop._lost)
    # Partitions whose gaps were not rebuilt (abandoned, or left to the batch's redo): their
    # offsets are not committed with this batch.
    unsettled: set[int] = field(default_factory=set)


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
        handover: Handover,
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
        self.handover = handover
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
        # Revocations counted, and the count at each partition's last one: a batch whose
        # records were read before a partition's revocation commits nothing of it.
        self._revocations = 0
        self._lost: dict[int, int] = {}
        # While a rebuild serves the group: the partitions it paused (None otherwise).
        self._paused: set[int] | None = None
        self._stopping: threading.Event | None = None  # run()'s stop, while it runs
        # Partitions whose rebuild a stop cut short: no batch commits them any more (the one
        # in flight, settled on the way out, would pass the record whose gap was not rebuilt).
        self._withheld: set[int] = set()

    @property
    def consumer(self) -> Consumer | None:
        """The consumer while :meth:`run` runs."""
        return self._consumer

    def run(self, consumer: Consumer, membership: Membership, stop: threading.Event) -> None:
        """Until ``stop``; the batch in hand is settled and committed before it returns."""
        self._consumer, self._stopping = consumer, stop
        self._withheld = set()
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
                    # Not past records a rebuild's poll put aside for the next batch, nor
                    # past those of a rebuild a stop cut short.
                    idle = not batch and self.inflight is None and not self._redo
                    if idle and not stop.is_set():
                        self._commit_past_markers(consumer)
                self._finish_inflight(consumer, wait=True)
                self._pass_on(last=True)  # nothing else knows of it
        finally:
            self._left_unpassed()
            self.inflight = None
            self._consumer = self._stopping = None
            self._watchdog.close()
            self._watchdog = CallWatchdog(0)

    def process(self, messages: Sequence[Message], serial: int | None = None) -> Batch:
        """Apply one batch from start to finish (nothing else in flight)."""
        batch = self.submit(messages, serial)
        self.settle(batch)
        return batch

    def submit(self, messages: Sequence[Message], serial: int | None = None) -> Batch:
        """Decode, plan against the cached states and submit the batch to Redis. ``serial``:
        the revocations counted when its records were read, if not now."""
        started = time.perf_counter()
        items = [
            decode(m.key(), m.value(), m.partition() or 0, m.offset() or 0, m.headers())
            for m in messages
        ]
        sessions = {i.session_id: i.partition for i in items if type(i) is Record}
        self.store.load(sessions, self.inflight)
        plan = self.planner.plan(items)
        self.poison.deliver(plan.dead)
        pending = self.store.link.submit(plan.commands)
        serial = self._revocations if serial is None else serial
        return Batch(messages, sessions, plan, pending, started, serial)

    def settle(self, batch: Batch, rebuild: bool = True) -> None:
        """Read the batch's replies and settle them: what Redis refused is counted, rebuilt or
        blocked; dead letters are delivered. After this its offsets may be committed, but for
        its ``unsettled`` partitions: gaps in a partition revoked meanwhile, or all of its gaps
        if not ``rebuild`` (inside a rebalance callback, where the group cannot be polled)."""
        plan = batch.plan
        results = batch.pending.result()
        if any(isinstance(r, redis.exceptions.NoScriptError) for r in results):
            # Redis restarted: nothing of this batch ran. Load the scripts and send it again;
            # a batch submitted after it meets the same and is sent again after it.
            load_all(self.store.client)
            results = self.store.link.round_trip(plan.commands)
        self.planner.settle(plan.queued, results, plan.rebuild)
        if plan.rebuild and not rebuild:
            batch.unsettled.update(plan.rebuild)
        elif plan.rebuild:
            with self._serving_group():
                batch.unsettled |= self.rebuilds.rebuild(
                    plan.rebuild, cause="gap", hold=lambda p: self._hold(p, batch.serial)
                )
        if rebuild and self.store.unconfirmed:
            self._mend_behind()
        self.poison.flush()
        self.store.evict()
        metrics.BATCH_SECONDS.labels(self.name).observe(time.perf_counter() - batch.started)
        for result in metrics.RESULTS:
            n = self.stats[result] - self._published[result]
            if n:
                metrics.EVENTS.labels(self.name, result).inc(n)
                self._published[result] = self.stats[result]

    def _mend_behind(self) -> None:
        """After Redis failed: rebuild the sessions it now holds behind what the cache
        believed applied (a failover's lost writes), whether or not another event of theirs
        comes. Only a batch submitted after the reset gets here (a reset fails every batch in
        hand), so whatever was planned before it is applied again. Kept until done: a failure
        here retries the batch, and the next one settled asks again. Handed on in Redis
        before the rebuild (:mod:`.handover`), as nothing else would show a next owner that
        these sessions are behind: the lost events' offsets are committed."""
        behind = self.store.behind()
        if behind:
            log.warning(
                "projector %s: Redis holds %d session(s) behind what was applied before it "
                "failed (writes lost in a failover): rebuilding them from the topic",
                self.name,
                sum(map(len, behind.values())),
            )
            self.handover.record(behind)
            # Not cut short by a stop, unlike a gap's rebuild: the stop waits for the mend
            # rather than leave it to the next owner's scan. What a kill cuts short, or a
            # revocation abandons, stays handed on.
            self._mend(behind, stoppable=False)
        # Here, not in behind(): until the rebuilds are done, a failure retries the batch and
        # the next one settled asks again.
        self.store.unconfirmed.clear()

    def _take_over_mends(self) -> None:
        """Hand on what a failover set back in partitions revoked while Redis was away, then
        rebuild the sessions whose failover mend a previous owner of the partitions assigned
        since the last round handed on (:mod:`.handover`): one read per assignment, and one a
        minute for every partition owned. Nothing else is in hand meanwhile, so a failure
        leaves no batch's replies unread: the mend is tried again a little later, and the next
        batch settled checks what the cache held.
        A stop cuts it short, unlike the mend itself: what is left stays handed on, to
        whoever is assigned the partitions next (no batch here commits them any more)."""
        handover = self.handover
        if not self._pass_on():
            return
        owed: dict[int, set[str]] = {}
        try:
            owed = handover.owed()
            if not owed:
                return
            log.warning(
                "projector %s: taking over the failover mend of %d session(s) in partition(s) "
                "%s left unfinished: rebuilding them from the topic",
                self.name,
                *_tally(owed),
            )
            self._mend(owed, stoppable=True)
        except _RETRYABLE as exc:
            log.warning(
                "projector %s: taking over a failover mend: %s; trying again in %.0f s",
                self.name,
                exc,
                _TAKE_OVER_RETRY_S,
            )
            if isinstance(exc, _REDIS_ERRORS):
                # The link may hold unread replies, and a rebuild caches the states it writes
                # before the write lands. Not after Kafka's: a scan fails before its rewrite,
                # a beat's poll between two writes that landed. What it cached of the
                # sessions owed is not believed applied: they stay owed, rebuilt at the retry.
                self.store.reset(unacked={sid for sids in owed.values() for sid in sids})
            handover.postpone(_TAKE_OVER_RETRY_S)

    def _pass_on(self, last: bool = False) -> bool:
        """Hand on what a failover set back in partitions revoked while Redis was away
        (:meth:`.handover.Handover.pass_on`); False if Redis did not take it, tried again a
        little later unless ``last``. Reads and writes through the client: the link and the
        cache stay."""
        try:
            passed = self.handover.pass_on()
        except _REDIS_ERRORS as exc:
            if last:
                return False  # said by _left_unpassed
            log.warning(
                "projector %s: handing on the failover mend of partitions revoked while Redis "
                "was away: %s; trying again in %.0f s",
                self.name,
                exc,
                _PASS_ON_RETRY_S,
            )
            self.handover.postpone(_PASS_ON_RETRY_S)
            return False
        if passed:
            log.warning(
                "projector %s: Redis holds %d session(s) of partition(s) %s, which moved to "
                "another instance while Redis was away, behind what was applied before it "
                "failed: handed on to their new owner",
                self.name,
                *_tally(passed),
            )
        return True

    def _left_unpassed(self) -> None:
        """At the end: what could not be handed on is lost with this process, so say what."""
        left = self.handover.drop_moved()
        if left:
            log.warning(
                "projector %s: %d session(s) of partition(s) %s, which moved to another "
                "instance while Redis was away, were not checked for writes a failover lost "
                "(Redis did not answer before the end): run `dsh verify` on them: %s",
                self.name,
                *_tally(left),
                ", ".join(sorted(sid for sids in left.values() for sid in sids)[:20]),
            )

    def _mend(self, sessions: Mapping[int, set[str]], stoppable: bool) -> None:
        """Rebuild the sessions a failover set back (partition → sessions), each partition
        leaving the handed-on mend once rebuilt; a partition revoked meanwhile is abandoned,
        as is every one at a stop if ``stoppable``: what is left stays handed on."""
        serial = self._revocations  # the partitions revoked so far were forgotten
        with self._serving_group():
            self.rebuilds.rebuild(
                sessions,
                cause="redis-failover",
                hold=lambda p: self._hold(p, serial, stoppable),
                rebuilt=self.handover.settled,
            )

    def commit(
        self,
        consumer: Consumer,
        messages: Sequence[Message],
        wait: bool = False,
        serial: int | None = None,
        skip: Collection[int] = (),
    ) -> None:
        """Commit the offsets after ``messages`` (applied in Redis by now), but of partitions
        in ``skip`` or revoked since the records were read (``serial``). Between batches
        the commit is not waited for: it only says where a next owner resumes, and the apply
        is idempotent, so a commit that fails or lands late costs a few events applied twice
        (skipped as duplicates), never a wrong read model; its result comes to
        :meth:`on_commit`. Before partitions go (``wait``) it is waited for, so their next
        owner starts where this one stopped."""
        ends: dict[int, int] = {}
        for m in messages:
            ends[m.partition() or 0] = max(ends.get(m.partition() or 0, -1), m.offset() or 0)
        withheld = self._withheld
        for p in [p for p in ends if p in skip or p in withheld or self._revoked_since(p, serial)]:
            del ends[p]
        if not ends:
            return
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

    def settle_before_rebalance(self, revoked: Collection[int]) -> None:
        """Finish and commit the batch in flight while its partitions are still ours. If that
        fails it is not committed: whoever gets the partitions that go resumes from the last
        commit and applies their records again, harmlessly; the records of the partitions
        that stay go again here first (:meth:`_step`), since the consumer has moved past
        them and the next commit would pass them by. Its gaps are not rebuilt here, inside
        poll(): a partition with one is not committed, and goes again like a failed batch.

        From a rebuild's poll (:meth:`_hold`) nothing is settled: the batches in hand commit
        none of the ``revoked`` partitions, and a rebuild of one is abandoned."""
        assert self._consumer is not None
        batch = None if self._paused is not None else self.inflight
        try:
            if batch is not None:
                self.settle(batch, rebuild=False)
                self.inflight = None
                self._redo += [m for m in batch.messages if m.partition() in batch.unsettled]
                self.commit(self._consumer, batch.messages, True, batch.serial, batch.unsettled)
        except Exception as exc:  # raising here would surface from inside poll()
            log.warning("projector %s: batch in flight at a rebalance: %s", self.name, exc)
            failed = self.inflight.messages if self.inflight is not None else []
            self._redo += failed
            self.inflight = None
            # The link may hold unread replies, the cache be ahead of Redis.
            self.store.reset(unacked=_sessions_of(failed))
        finally:
            self._revocations += 1
            for p in revoked:
                self._lost[p] = self._revocations
            if self._paused is not None:
                self._paused -= set(revoked)
            self._redo = [m for m in self._redo if m.partition() not in revoked]

    def _revoked_since(self, partition: int, serial: int | None) -> bool:
        return serial is not None and self._lost.get(partition, 0) > serial

    @contextmanager
    def _serving_group(self) -> Iterator[None]:
        """While a rebuild runs: the assigned partitions paused, so that :meth:`_hold` can poll
        the group for its membership without taking records; resumed after."""
        consumer = self._consumer
        if consumer is None or self._paused is not None:
            yield  # no group (a batch processed by hand), or served already
            return
        assigned = consumer.assignment()
        if assigned:
            consumer.pause(assigned)
        self._paused = {tp.partition for tp in assigned}
        try:
            yield
        finally:
            self._paused = None
            if owned := consumer.assignment():
                consumer.resume(owned)

    def _hold(self, partition: int, serial: int, stoppable: bool = True) -> bool:
        """At a rebuild's beat: serve the group (within max.poll.interval.ms, rebalance
        callbacks), and say whether ``partition`` is still ours since ``serial`` (and, if
        ``stoppable``, whether the projector is not stopping)."""
        consumer, paused = self._consumer, self._paused
        if consumer is not None and paused is not None:
            message = consumer.poll(0)
            # Only a partition assigned since the pause has records to give (one per poll):
            # they go first in the next batch, as the consumer has moved past them.
            if message is not None and self._usable(message):
                self._redo.append(message)
            added = [tp for tp in consumer.assignment() if tp.partition not in paused]
            if added:
                consumer.pause(added)
                paused.update(tp.partition for tp in added)
        if stoppable and self._stopping is not None and self._stopping.is_set():
            self._withheld.add(partition)  # by any batch: whoever runs next rebuilds it
            return False
        return not self._revoked_since(partition, serial)

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
        serial = self._revocations  # before any poll: a take-over's may revoke partitions
        try:
            if self.handover.due():  # partitions assigned, maybe a mend handed on with them
                self._finish_inflight(consumer)
                self._take_over_mends()
                messages = self._still_ours(messages, serial)  # its polls may revoke some
            batch = self.submit(messages, serial) if messages else None
            self._finish_inflight(consumer)
            self.inflight = batch
        except _RETRYABLE as exc:
            # Nothing of the batch in flight nor of this one is committed: both go again, in
            # order, one at a time. The cache may be ahead of Redis, so forget it.
            serial = self.inflight.serial if self.inflight else serial
            failed = [*(self.inflight.messages if self.inflight else ()), *messages]
            redo = self._still_ours(failed, serial)
            self.inflight = None
            self.store.reset(unacked=_sessions_of(failed))
            if stop.is_set() or not redo:
                raise
            log.warning("projector %s: %s; retrying %d records", self.name, exc, len(redo))
            done = self._process_until_done(redo, stop, serial)
            self.commit(consumer, redo, serial=serial, skip=done.unsettled)

    def _still_ours(self, messages: list[Message], serial: int) -> list[Message]:
        """``messages`` but those of partitions revoked since ``serial``: their next owner's
        to apply. Submitted, they would load their sessions back into a cache that forgot
        them (a later failover's mend could then set back what the next owner applied)."""
        if self._revocations == serial:
            return messages
        return [m for m in messages if not self._revoked_since(m.partition() or 0, serial)]

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
            self.commit(consumer, batch.messages, wait, batch.serial, batch.unsettled)

    def _process_until_done(
        self, messages: list[Message], stop: threading.Event, serial: int
    ) -> Batch:
        delay = 0.1
        while True:
            try:
                messages = self._still_ours(messages, serial)  # a rebuild's poll may revoke
                batch = self.process(messages, serial)
                self.writes_failing = None
                return batch
            except _RETRYABLE as exc:
                self.writes_failing = f"{type(exc).__name__}: {exc}"
                self.health.beat()  # waiting for Redis is progress: a restart would not help
                self.store.reset(unacked=_sessions_of(messages))
                if stop.is_set():
                    raise
                log.warning("projector %s: %s; retrying the batch", self.name, exc)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _commit_failed(self, cause: object) -> None:
        self.stats["commit_failed"] += 1
        metrics.COMMIT_FAILURES.labels(self.name).inc()
        log.warning("projector %s: offset commit failed: %s", self.name, cause)


def _sessions_of(messages: Iterable[Message]) -> set[str]:
    """The sessions ``messages`` are records of (the events topic is keyed by session)."""
    # A key that is not UTF-8 is poison (records.decode): it names no cached session.
    return {key.decode("utf-8", "replace") for m in messages if (key := m.key()) is not None}


def _tally(by_partition: Mapping[int, Collection[str]]) -> tuple[int, str]:
    """How many sessions, and the partitions they are in, for a log line."""
    return sum(map(len, by_partition.values())), ", ".join(map(str, sorted(by_partition)))
