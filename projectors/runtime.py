"""The consumer runtime every projector shares.

One consumer group per projection, read_committed, offsets committed by hand only after Redis
acknowledged the batch (at-least-once delivery; the apply script makes it effectively once).
A batch spans many sessions: events are planned in Python against a per-session state cache
and sent as one pipeline of script calls. Whatever the cache believes, Redis decides: a
duplicate is skipped, a gap (Redis lost state) rebuilds that session from the topic.

Two batches are in hand on a busy topic: batch N+1 is planned and submitted while Redis
applies batch N; then N's replies are read and settled and N's offsets committed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from dsh.errors import SessionError
from projectors import metrics
from projectors.batch_io import Pending, RedisClient, batch_io, pipelined
from projectors.errors import PoisonRecordError
from projectors.fold import Image
from projectors.link import raise_errors
from projectors.marks import Marks
from projectors.projection import Projection, dumps
from projectors.records import Poison, Record, decode, encode
from projectors.scripts import APPLY, BLOCK, load_all
from projectors.settings import ProjectorSettings
from projectors.topic_reader import read_sessions
from schemas.records import event_headers
from servicekit import kafka_clients
from servicekit.dlq import DeadLetters, source_of
from servicekit.gc_tuning import observe_gc_pauses, young_gc_threshold
from servicekit.kafka_clients import Membership
from servicekit.partition_reader import PartitionReadError
from servicekit.settings import KafkaSettings
from servicekit.watchdog import CallWatchdog

S = TypeVar("S")
log = logging.getLogger("projectors")

APPLIED, DUPLICATE, GAP, BLOCKED = 1, 0, -1, -2
# A batch that meets one of these is applied again from the start, with the one before it:
# nothing of either was committed, and applying again is harmless.
_RETRYABLE = (redis.ConnectionError, redis.TimeoutError, KafkaException, PartitionReadError)
# A synchronous offset commit has no timeout: it waits for the group coordinator. Past this
# and the grace, the watchdog ends the process rather than let it wait for ever.
_COMMIT_BOUND_S = 30.0


@dataclass
class Entry(Generic[S]):
    state: S
    blocked: bool = False
    apply: tuple[Any, ...] | None = None  # ("EVALSHA", sha, numkeys, *keys), built once
    partition: int = -1  # where its events come from: a revoked partition's entries go


@dataclass
class Batch:
    """A batch between its submission to Redis and its settlement (replies read, gaps rebuilt,
    dead letters flushed); its offsets are committed only after that."""

    messages: Sequence[Message]
    sessions: dict[str, int]  # session → its partition
    commands: list[tuple[Any, ...]]
    queued: list[Record | Poison]
    rebuild: dict[int, set[str]]
    pending: Pending
    started: float


class Runtime(Generic[S]):
    def __init__(
        self,
        projection: Projection[S],
        kafka: KafkaSettings,
        client: RedisClient,
        settings: ProjectorSettings,
    ) -> None:
        self.projection = projection
        self.name = projection.name
        self.kafka = kafka
        self.redis = client
        self.settings = settings
        self.keys = projection.keys
        self.topic = kafka.topic("events")
        self.instance = uuid.uuid4().hex[:12]
        self.cache: OrderedDict[str, Entry[S]] = OrderedDict()
        self.stats: Counter[str] = Counter()
        self.dlq = DeadLetters(kafka, f"project-{self.name}")
        self.link = batch_io(client)  # one Redis, or batches split by slot over a cluster
        self._consumer: Consumer | None = None
        self._membership: Membership | None = None
        self._inflight: Batch | None = None  # submitted to Redis, not settled yet
        self._published: Counter[str] = Counter()  # stats already counted in Prometheus
        self._next_check = 0.0
        self._replay_pending = False
        self._owned: set[int] = set()
        self._watchdog = CallWatchdog(0)  # off outside run()
        self.marks = Marks(client, self.keys, self.name, self.instance)
        load_all(client)

    @property
    def partitions(self) -> frozenset[int]:
        """The partitions this instance applies now."""
        return frozenset(self._owned)

    def reconnected(self) -> None:
        """In a forked process: Redis through connections of its own (redis-py's pool resets
        itself in a new process; the link's connection is the parent's)."""
        self.link = batch_io(self.redis)
        self.cache.clear()

    # --- the loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        observe_gc_pauses(metrics.GC_PAUSES)
        metrics.expose(self.name)
        self._watchdog = CallWatchdog(self.settings.stuck_call_grace_s)
        group_id = self.settings.group_id(self.name)
        consumer = kafka_clients.group_consumer(
            self.kafka,
            group_id,
            session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            instance_id=(
                f"{self.settings.instance_id}-{self.name}" if self.settings.instance_id else None
            ),
            on_commit=self._on_commit,
        )
        self._consumer = consumer
        self._membership = Membership(consumer, [self.topic], self, log, f"projector {self.name}")
        self.marks.touch()
        log.info(
            "projector %s: subscribed to %s as group %s, waiting for partitions",
            self.name,
            self.topic,
            group_id,
        )
        try:
            with young_gc_threshold(self.settings.gc_threshold):
                while not stop.is_set():
                    if self._housekeeping_due():
                        self._step(consumer, [], stop)  # settle what is in flight first
                        self._housekeeping(consumer)
                    # Records already fetched are taken at once while a batch is in flight:
                    # they are planned while Redis applies it. Otherwise wait for the next.
                    batch = self._next_batch(consumer, wait=self._inflight is None)
                    self._step(consumer, [m for m in batch if self._usable(m)], stop)
                self._finish_inflight(consumer, wait=True)
        finally:
            self._inflight = None
            self._consumer = self._membership = None
            self.link.close()
            consumer.close()
            self.dlq.close()
            self._watchdog.close()
            self._watchdog = CallWatchdog(0)
            log.info("projector %s stopped: %s", self.name, dict(self.stats))

    def _next_batch(self, consumer: Consumer, wait: bool) -> list[Message]:
        """Wait for one record, then take whatever else is already fetched: a quiet topic
        gets low latency, a busy one full batches."""
        assert self._membership is not None
        if not wait:
            batch = consumer.consume(self.settings.batch_size, 0)
            self._membership.raise_pending()
            return batch
        first = consumer.poll(self.settings.poll_timeout_s)
        self._membership.raise_pending()
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
        try:
            batch = self._start(messages) if messages else None
            self._finish_inflight(consumer)
            self._inflight = batch
        except _RETRYABLE as exc:
            # Nothing of the batch in flight nor of this one is committed: both go again, in
            # order, one at a time. The cache may be ahead of Redis, so forget it.
            redo = [*(self._inflight.messages if self._inflight else ()), *messages]
            self._inflight = None
            self.link.reset()
            self.cache.clear()
            if stop.is_set() or not redo:
                raise
            log.warning("projector %s: %s; retrying %d records", self.name, exc, len(redo))
            self._process_until_done(redo, stop)
            self._commit(consumer, redo)

    def _finish_inflight(self, consumer: Consumer, wait: bool = False) -> None:
        batch = self._inflight
        if batch is not None:
            self._finish(batch)
            self._inflight = None
            self._commit(consumer, batch.messages, wait)

    def _process_until_done(self, messages: list[Message], stop: threading.Event) -> None:
        delay = 0.1
        while True:
            try:
                self.process(messages)
                return
            except _RETRYABLE as exc:
                self.link.reset()
                self.cache.clear()
                if stop.is_set():
                    raise
                log.warning("projector %s: %s; retrying the batch", self.name, exc)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _commit(self, consumer: Consumer, messages: Sequence[Message], wait: bool = False) -> None:
        """Commit the offsets after ``messages`` (applied in Redis by now). Between batches
        the commit is not waited for: it only says where a next owner resumes, and the apply
        is idempotent, so a commit that fails or lands late costs a few events applied twice
        (skipped as duplicates), never a wrong read model; its result comes to
        :meth:`_on_commit`. Before partitions go (``wait``) it is waited for, so their next
        owner starts where this one stopped."""
        ends: dict[int, int] = {}
        for m in messages:
            ends[m.partition() or 0] = max(ends.get(m.partition() or 0, -1), m.offset() or 0)
        offsets = [TopicPartition(self.topic, p, o + 1) for p, o in ends.items()]
        try:
            if not wait:
                consumer.commit(offsets=offsets, asynchronous=True)
                return
            with self._watchdog.watch("commit", _COMMIT_BOUND_S):
                consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:  # a rebalance in between: the next owner re-applies, harmlessly
            self._commit_failed(exc)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            self._commit_failed(err)

    def _commit_failed(self, cause: object) -> None:
        self.stats["commit_failed"] += 1
        metrics.COMMIT_FAILURES.labels(self.name).inc()
        log.warning("projector %s: offset commit failed: %s", self.name, cause)

    # --- partitions coming and going (servicekit.kafka_clients.Membership calls these) ------

    def owned(self) -> list[int]:
        return sorted(self._owned)

    def assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        # Incremental: ``partitions`` are the ones added. What this instance already owns
        # keeps flowing, its batch in flight and its cached sessions included.
        try:
            unmarked = self.marks.unmarked([tp.partition for tp in partitions])
            fresh = [tp for tp in partitions if tp.partition in unmarked]
            if fresh:
                # Redis holds nothing of these partitions (new, or lost while no process of
                # this projection ran): their committed offsets say nothing about Redis.
                for tp in fresh:
                    log.info(
                        "projector %s: Redis holds nothing of partition %d: replaying it from "
                        "the start",
                        self.name,
                        tp.partition,
                        extra={"partition": tp.partition},
                    )
                    tp.offset = OFFSET_BEGINNING
                self.marks.mark([tp.partition for tp in fresh])
        except redis.RedisError as exc:
            # Unknown: the sentinel check notices an empty Redis once it answers again.
            log.warning("projector %s: on assign: %s", self.name, exc)
        self.stats["partitions_assigned"] += len(partitions)
        self._owned.update(tp.partition for tp in partitions)
        metrics.PARTITIONS.labels(self.name).set(len(self._owned))
        # Explicitly: offsets set on the callback's list are ignored unless assigned so.
        return partitions

    def revoke(self, partitions: list[TopicPartition]) -> None:
        # Lost (membership expired) too: the batch in flight is still applied (harmless, the
        # apply is idempotent) but its offsets are refused; the next owner applies it again.
        assert self._consumer is not None
        self._settle_before_rebalance(self._consumer)
        # The next owner applies these partitions' sessions: what the cache believes of them
        # is stale from now on. The sessions of the partitions kept stay cached.
        gone = {tp.partition for tp in partitions}
        for sid in [sid for sid, e in self.cache.items() if e.partition in gone or e.partition < 0]:
            del self.cache[sid]
        self.stats["partitions_revoked"] += len(partitions)
        for tp in partitions:
            self._owned.discard(tp.partition)
            # Not ours: a lag left behind would be reported beside the new owner's.
            with contextlib.suppress(KeyError):
                metrics.LAG.remove(self.name, str(tp.partition))
        metrics.PARTITIONS.labels(self.name).set(len(self._owned))

    def _settle_before_rebalance(self, consumer: Consumer) -> None:
        """Finish and commit the batch in flight while its partitions are still ours. If that
        fails it is dropped uncommitted: whoever gets the partitions resumes from the last
        commit and applies it again, harmlessly."""
        try:
            self._finish_inflight(consumer, wait=True)
        except Exception as exc:  # raising here would surface from inside poll()
            log.warning("projector %s: batch in flight at a rebalance: %s", self.name, exc)
            self._inflight = None
            self.link.reset()

    def _housekeeping_due(self) -> bool:
        return self._replay_pending or time.monotonic() >= self._next_check

    def _housekeeping(self, consumer: Consumer) -> None:
        try:
            self._check_redis(consumer)
        except redis.RedisError as exc:  # the next round tries again; batches retry on their own
            log.warning("projector %s: housekeeping: %s", self.name, exc)

    def _check_redis(self, consumer: Consumer) -> None:
        now = time.monotonic()
        if now < self._next_check and not self._replay_pending:
            return
        self._next_check = now + self.settings.sentinel_interval_s
        if not self._sentinel_alive():
            self._replay_pending = True
        if self._replay_pending:
            self._replay_pending = not self._seek_to_start(consumer)
        self._report_gauges(consumer)

    def _sentinel_alive(self) -> bool:
        """False when Redis (any primary of a cluster) lost our sentinel: it was flushed, or
        restarted empty."""
        if self.marks.alive():
            return True
        log.warning("projector %s: Redis lost its data; replaying the topic", self.name)
        self.stats["redis_lost"] += 1
        return False

    def _seek_to_start(self, consumer: Consumer) -> bool:
        self.cache.clear()
        try:
            assignment = consumer.assignment()
            for tp in assignment:
                consumer.seek(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))
        except Exception as exc:  # not fetching yet: try again on the next round
            log.info("projector %s: seek postponed: %s", self.name, exc)
            return False
        for tp in assignment:
            log.info(
                "projector %s: replaying partition %d from the start",
                self.name,
                tp.partition,
                extra={"partition": tp.partition},
            )
        self.marks.mark([tp.partition for tp in assignment])
        metrics.REBUILDS.labels(self.name, "redis-lost").inc()
        return True

    def _report_gauges(self, consumer: Consumer) -> None:
        try:
            assignment = consumer.assignment()
            positions = consumer.position(assignment) if assignment else []
            for tp in positions:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset >= 0 and high >= 0:
                    metrics.LAG.labels(self.name, str(tp.partition)).set(max(high - tp.offset, 0))
            metrics.BLOCKED.labels(self.name).set(self.redis.scard(self.keys.blocked(self.name)))
        except Exception as exc:  # metrics never stop the projector
            log.debug("projector %s: gauges: %s", self.name, exc)

    # --- one batch -------------------------------------------------------------------------

    def process(self, messages: Sequence[Message]) -> None:
        """Apply one batch from start to finish (nothing else in flight)."""
        self._finish(self._start(messages))

    def _start(self, messages: Sequence[Message]) -> Batch:
        """Decode, plan against the cached states and submit the batch to Redis."""
        started = time.perf_counter()
        items = [
            decode(m.key(), m.value(), m.partition() or 0, m.offset() or 0, m.headers())
            for m in messages
        ]
        sessions = {i.session_id: i.partition for i in items if type(i) is Record}
        self._load(sessions)
        commands, queued, rebuild = self._plan(items)
        return Batch(
            messages, sessions, commands, queued, rebuild, self.link.submit(commands), started
        )

    def _finish(self, batch: Batch) -> None:
        """Read the batch's replies and settle them: what Redis refused is counted, rebuilt or
        blocked; dead letters are delivered. After this its offsets may be committed."""
        results = batch.pending.result()
        if any(isinstance(r, redis.exceptions.NoScriptError) for r in results):
            # Redis restarted: nothing of this batch ran. Load the scripts and send it again;
            # a batch submitted after it meets the same and is sent again after it.
            load_all(self.redis)
            results = self.link.round_trip(batch.commands)
        self._settle(batch.queued, results, batch.rebuild)
        if batch.rebuild:
            self.rebuild(batch.rebuild, cause="gap")
        self.dlq.flush()
        # Evicting only now: every session of the batch stays cached while it is in hand.
        while len(self.cache) > self.settings.cache_sessions:
            self.cache.popitem(last=False)
        metrics.BATCH_SECONDS.labels(self.name).observe(time.perf_counter() - batch.started)
        for result in metrics.RESULTS:
            n = self.stats[result] - self._published[result]
            if n:
                metrics.EVENTS.labels(self.name, result).inc(n)
                self._published[result] = self.stats[result]

    def _load(self, sessions: dict[str, int]) -> None:
        missing = [sid for sid in sessions if sid not in self.cache]
        for sid in sessions.keys() - set(missing):
            self.cache.move_to_end(sid)
        if not missing:
            return
        inflight = self._inflight
        if inflight is not None and not inflight.sessions.keys().isdisjoint(missing):
            # A session of the batch in flight was dropped from the cache (Redis refused one
            # of its events, or it was evicted): read its state only after Redis ran that batch.
            inflight.pending.result()
        reads = [self.projection.load_reads(sid) for sid in missing]
        commands = [c for session_reads in reads for c in session_reads]
        commands.append(("SMISMEMBER", self.keys.blocked(self.name), *missing))
        replies = pipelined(self.redis, commands)
        blocked = replies[-1]
        at = 0
        for sid, session_reads, is_blocked in zip(missing, reads, blocked, strict=True):
            state = self.projection.load(replies[at : at + len(session_reads)])
            at += len(session_reads)
            self.cache[sid] = Entry(state, bool(is_blocked), partition=sessions[sid])

    def _plan(
        self, items: Sequence[Record | Poison]
    ) -> tuple[list[tuple[Any, ...]], list[Record | Poison], dict[int, set[str]]]:
        commands: list[tuple[Any, ...]] = []
        queued: list[Record | Poison] = []
        rebuild: dict[int, set[str]] = defaultdict(set)
        cache, projection = self.cache, self.projection
        plan, applied_of = projection.plan, projection.applied
        counts = {"blocked": 0, "duplicate": 0, "gap": 0}
        try:
            for item in items:
                if type(item) is not Record:
                    self._dead_letter(item, commands, queued)  # type: ignore[arg-type]
                    continue
                sid = item.session_id
                if rebuild and sid in rebuild[item.partition]:
                    continue
                entry = cache[sid]
                applied = applied_of(entry.state)
                seq = item.event.seq
                if entry.blocked:
                    counts["blocked"] += 1
                elif seq <= applied:
                    counts["duplicate"] += 1
                elif seq > applied + 1:
                    counts["gap"] += 1
                    rebuild[item.partition].add(sid)
                else:
                    try:
                        ops = plan(entry.state, item.event)
                    except SessionError as exc:
                        entry.blocked = True
                        poison = Poison(sid, exc, sid.encode(), None, item.partition, item.offset)
                        self._dead_letter(poison, commands, queued, seq=seq, record=item)
                        continue
                    head = entry.apply
                    if head is None:
                        keys = projection.all_keys(sid)
                        head = entry.apply = ("EVALSHA", APPLY.sha, len(keys), *keys)
                    commands.append((*head, seq, *ops))
                    queued.append(item)
        finally:
            for result, n in counts.items():
                if n:
                    self._count(result, n)
        return commands, queued, {p: s for p, s in rebuild.items() if s}

    def _settle(
        self,
        queued: list[Record | Poison],
        results: list[Any],
        rebuild: dict[int, set[str]],
    ) -> None:
        applied = 0
        try:
            for item, result in zip(queued, results, strict=True):
                if type(item) is not Record:
                    continue
                if type(result) is list and result[0] == APPLIED:  # the usual case
                    applied += 1
                    continue
                sid = item.session_id
                if isinstance(result, Exception):
                    log.warning(
                        "projector %s: session %s seq %d: %s",
                        self.name,
                        sid,
                        item.seq,
                        result,
                        extra={"session": sid, "partition": item.partition, "seq": item.seq},
                    )
                    status = GAP
                else:
                    status = int(result[0])
                if status == APPLIED:
                    applied += 1
                elif status == DUPLICATE:
                    # Another process got there first: our cached state is not Redis's any more.
                    self._count("duplicate")
                    self.cache.pop(sid, None)
                elif status == BLOCKED:
                    self._count("blocked")
                    entry = self.cache.get(sid)
                    if entry is not None and not entry.blocked:  # news to this process: say so once
                        entry.blocked = True
                        log.info(
                            "projector %s: session %s is blocked; seq %d and later are not applied",
                            self.name,
                            sid,
                            item.seq,
                            extra={"session": sid, "partition": item.partition, "seq": item.seq},
                        )
                else:
                    self._count("gap")
                    self.cache.pop(sid, None)
                    rebuild.setdefault(item.partition, set()).add(sid)
        finally:
            if applied:
                self._count("applied", applied)

    def _count(self, result: str, n: int = 1) -> None:
        self.stats[result] += n  # published to Prometheus once per batch

    def _dead_letter(
        self,
        poison: Poison,
        commands: list[tuple[Any, ...]],
        queued: list[Record | Poison],
        seq: int = -1,
        record: Record | None = None,
    ) -> None:
        error = poison.error
        source = source_of(self.topic, poison.partition, poison.offset)
        value, headers = poison.value, poison.headers
        if value is None and record is not None:  # refused after decoding: send it re-encoded
            value = encode(record.session_id, record.event.to_json())
            headers = tuple(event_headers(record.event.type))
        self.dlq.send(poison.key, value, error, source, headers)
        self._count("poison")
        metrics.DLQ.labels(self.name, error.code).inc()
        context: dict[str, Any] = {"partition": poison.partition, "code": error.code}
        if poison.session_id is not None:
            context["session"] = poison.session_id
        if seq >= 0:
            context["seq"] = seq
        log.warning(
            "projector %s: %s → DLQ%s: [%s] %s",
            self.name,
            source,
            "" if poison.session_id is None else f", session {poison.session_id} blocked",
            error.code,
            error.message,
            extra=context,
        )
        if poison.session_id is not None:
            block = self._block_commands(poison, seq)
            commands += block
            queued += [poison] * len(block)

    def _block_commands(self, poison: Poison, seq: int) -> list[tuple[Any, ...]]:
        sid = poison.session_id
        assert sid is not None
        error = poison.error
        reason = {
            "code": error.code,
            "error": type(error).__name__,
            "message": error.message,
            "seq": seq,
            "source": source_of(self.topic, poison.partition, poison.offset),
        }
        entry = self.cache.get(sid)
        if entry is not None:
            entry.blocked = True
        return [
            ("EVALSHA", BLOCK.sha, 1, self.keys.meta(self.name, sid), seq, dumps(reason)),
            ("SADD", self.keys.blocked(self.name), sid),
        ]

    # --- rebuilding sessions from the topic --------------------------------------------------

    def rebuild(self, sessions: dict[int, set[str]], cause: str) -> None:
        """Replace each session's keys with a projection of its whole log, atomically."""
        for partition, sids in sessions.items():
            for sid in sorted(sids):
                log.info(
                    "projector %s: rebuilding session %s from the topic (%s)",
                    self.name,
                    sid,
                    cause,
                    extra={"session": sid, "partition": partition, "cause": cause},
                )
            self.rebuild_logs(read_sessions(self.kafka, self.topic, partition, sids), cause)

    def catch_up(self, items: Sequence[Record | Poison]) -> None:
        """Apply records read after :meth:`rebuild_logs` wrote their sessions, the way the
        consumer loop applies a batch (next seq only): a replay's rewrite may have set a
        session back behind what a running projector had already applied from the records
        after the replay's scan. A session with a poison record here is rebuilt from its whole
        log, which blocks it, rather than dead-lettered again (the running projector does)."""
        poisoned: dict[int, set[str]] = defaultdict(set)
        for item in items:
            if type(item) is not Record and item.session_id is not None:
                poisoned[item.partition].add(item.session_id)
        records = [
            i
            for i in items
            if type(i) is Record and i.session_id not in poisoned.get(i.partition, ())
        ]
        if not records and not poisoned:
            return
        self._load({i.session_id: i.partition for i in records})
        commands, queued, rebuild = self._plan(records)
        self._settle(queued, self.link.round_trip(commands), rebuild)
        for partition, sids in poisoned.items():
            rebuild.setdefault(partition, set()).update(sids)
        if rebuild:
            self.rebuild(rebuild, cause="replay")
        self.dlq.flush()  # what planning refused (an invalid world) was dead-lettered

    def rebuild_logs(
        self, logs: Mapping[str, Sequence[Record | Poison]], cause: str, chunk: int = 20_000
    ) -> int:
        """Project each session's whole log into its keys, one MULTI per session so a reader
        sees the old projection or the new one, never a mix; many sessions per round trip.
        Poison records block the session but are not dead-lettered again: the consumer loop
        sends every poison record it reads. Returns the number of events applied."""
        batch: list[tuple[Any, ...]] = []
        applied = 0
        for sid, items in logs.items():
            commands, state, blocked = self._rebuild_commands(sid, items)
            batch += commands
            applied += self.projection.applied(state) + 1
            partition = next((i.partition for i in items if type(i) is Record), -1)
            self.cache[sid] = Entry(state, blocked, partition=partition)
            metrics.REBUILDS.labels(self.name, cause).inc()
            self.stats["rebuilt"] += 1
            if len(batch) >= chunk:
                raise_errors(self.link.round_trip(batch))
                batch = []
        if batch:
            raise_errors(self.link.round_trip(batch))
        return applied

    def _rebuild_commands(
        self, sid: str, items: Sequence[Record | Poison]
    ) -> tuple[list[tuple[Any, ...]], S, bool]:
        state = self.projection.fresh()
        image = Image(self.projection.all_keys(sid))
        block: list[tuple[Any, ...]] = []
        for item in items:
            if isinstance(item, Poison):
                block = self._block_commands(item, -1)
                self._log_blocked_in_rebuild(sid, item.partition, item.error)
                break
            applied = self.projection.applied(state)
            if item.seq <= applied:
                continue  # a duplicate in the log itself; never applied twice
            try:
                if item.seq > applied + 1:
                    raise PoisonRecordError(
                        f"session {sid}: the log jumps from seq {applied} to {item.seq}"
                    )
                ops = self.projection.plan(state, item.event)
            except SessionError as exc:
                poison = Poison(sid, exc, sid.encode(), None, item.partition, item.offset)
                block = self._block_commands(poison, item.seq)
                self._log_blocked_in_rebuild(sid, item.partition, exc, item.seq)
                break
            image.apply(item.seq, ops)
        # The blocked set indexes the meta hashes (the truth, which the apply script reads)
        # and lives in a slot of its own on a cluster, so it stays out of the session's MULTI:
        # the session leaves it before, and joins it after, its keys are rewritten.
        commands: list[tuple[Any, ...]] = [
            ("SREM", self.keys.blocked(self.name), sid),
            ("MULTI",),
            ("DEL", *image.keys),
            *image.commands(),
            *block[:1],  # the BLOCK script call
            ("EXEC",),
            *block[1:],  # SADD to the blocked set
        ]
        return commands, state, bool(block)

    def _log_blocked_in_rebuild(
        self, sid: str, partition: int, error: SessionError, seq: int = -1
    ) -> None:
        context: dict[str, Any] = {"session": sid, "partition": partition, "code": error.code}
        if seq >= 0:
            context["seq"] = seq
        log.warning(
            "projector %s: rebuilding session %s: its log cannot be applied, session blocked: "
            "[%s] %s",
            self.name,
            sid,
            error.code,
            error.message,
            extra=context,
        )
