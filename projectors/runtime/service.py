"""The :class:`Runtime` of one projection: it builds the parts and wires them to one consumer
group (read_committed, offsets committed by hand) and one Redis."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

from confluent_kafka import Message

from projectors import metrics
from projectors.batch_io import Link, RedisClient
from projectors.marks import Marks
from projectors.projection import Projection
from projectors.records import Poison, Record
from projectors.runtime.batches import Planner
from projectors.runtime.handover import Handover
from projectors.runtime.loop import Loop
from projectors.runtime.ownership import Ownership
from projectors.runtime.poison import PoisonRecords
from projectors.runtime.rebuilds import Rebuilds
from projectors.runtime.sessions import Entry, SessionStore
from projectors.runtime.watch import RedisWatch
from projectors.scripts import load_all
from projectors.settings import ProjectorSettings
from servicekit import kafka_clients
from servicekit.gc_tuning import observe_gc_pauses
from servicekit.health import Health
from servicekit.kafka_clients import Membership
from servicekit.redis_clients import redis_unreachable
from servicekit.settings import KafkaSettings

S = TypeVar("S")
# Readiness's code for a projector whose batch is being retried (Redis answers, writes fail).
WRITES_FAILING = "REDIS_WRITES_FAILING"

log = logging.getLogger("projectors")


class Runtime(Generic[S]):
    def __init__(
        self,
        projection: Projection[S],
        kafka: KafkaSettings,
        client: RedisClient,
        settings: ProjectorSettings,
        health: Health | None = None,
    ) -> None:
        """``health``: where the projector reports its loop's rounds and its readiness checks
        ``redis`` and ``lag``."""
        self.projection = projection
        self.name = projection.name
        self.kafka = kafka
        self.redis = client
        self.settings = settings
        self.keys = projection.keys
        self.topic = kafka.topic("events")
        self.instance = uuid.uuid4().hex[:12]
        self.stats: Counter[str] = Counter()
        self.store = SessionStore(projection, client, settings.cache_sessions)
        self.poison = PoisonRecords(kafka, self.name, self.topic, self.stats)
        self.planner = Planner(projection, self.store.cache, self.stats, self.topic)
        self.health = health or Health()
        self.rebuilds = Rebuilds(
            projection,
            kafka,
            self.topic,
            self.store,
            self.planner,
            self.poison,
            self.stats,
            self.health.beat,
        )
        self.handover = Handover(self.name, self.keys, self.store)
        self.marks = Marks(client, self.keys, self.name, self.instance)
        self.watch = RedisWatch(
            self.name, settings.sentinel_interval_s, self.marks, self.store, self.stats
        )
        self.health.check("redis", self._redis_not_ready)
        self.health.check("lag", self._lag_over_bound)
        self._membership: Membership | None = None  # while run() runs
        self.loop = Loop(
            self.name,
            self.topic,
            settings,
            self.store,
            self.planner,
            self.poison,
            self.rebuilds,
            self.handover,
            self.watch,
            self.stats,
            self.health,
        )
        self.ownership = Ownership(
            self.name,
            self.marks,
            self.store,
            self.stats,
            self.loop.settle_before_rebalance,
            lambda: self.loop.consumer,
            self.handover,
        )
        load_all(client)

    def _redis_not_ready(self) -> str | None:
        """Redis answers PING and the last batch's writes went through, or why not."""
        unreachable = redis_unreachable(self.redis)
        if unreachable is not None or self.loop.writes_failing is None:
            return unreachable
        return f"[{WRITES_FAILING}] {self.loop.writes_failing}"

    @property
    def partitions(self) -> frozenset[int]:
        """The partitions this instance applies now."""
        return self.ownership.partitions

    @property
    def cache(self) -> OrderedDict[str, Entry[S]]:
        return self.store.cache

    @property
    def link(self) -> Link:
        return self.store.link

    def reconnected(self) -> None:
        """In a forked process: Redis through connections of its own."""
        self.store.reconnect()

    def run(self, stop: threading.Event) -> None:
        observe_gc_pauses(metrics.GC_PAUSES)
        metrics.expose(self.name)
        group_id = self.settings.group_id(self.name)
        consumer = kafka_clients.group_consumer(
            self.kafka,
            group_id,
            session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            max_poll_interval_ms=self.settings.max_poll_interval_ms,
            instance_id=(
                f"{self.settings.instance_id}-{self.name}" if self.settings.instance_id else None
            ),
            on_commit=self.loop.on_commit,
        )
        membership = self._membership = Membership(
            consumer, [self.topic], self.ownership, log, f"projector {self.name}"
        )
        self.marks.touch()
        log.info(
            "projector %s: subscribed to %s as group %s, waiting for partitions",
            self.name,
            self.topic,
            group_id,
        )
        try:
            self.loop.run(consumer, membership, stop)
        finally:
            self._membership = None
            self.store.close()
            consumer.close()
            self.poison.close()
            log.info("projector %s stopped: %s", self.name, dict(self.stats))

    def process(self, messages: Sequence[Message]) -> None:
        """Apply one batch from start to finish (nothing else in flight)."""
        self.loop.process(messages)

    def _lag_over_bound(self) -> str | None:
        """Readiness: a member of its group, at most ``ready_max_lag`` records behind."""
        bound = self.settings.ready_max_lag
        if self._membership is None or not self._membership.joined:
            return f"not assigned its partitions by group {self.settings.group_id(self.name)} yet"
        lag = self.watch.lag
        if lag is None:
            return "consumer lag not measured yet (a partition not fetched from)"
        if lag > bound:
            return f"{lag} records behind its partitions' ends (bound: {bound})"
        return None

    def rebuild(self, sessions: Mapping[int, set[str]], cause: str) -> None:
        """Replace each session's keys (partition → sessions) with a projection of its whole
        log, atomically."""
        self.rebuilds.rebuild(sessions, cause)

    def catch_up(self, items: Sequence[Record | Poison]) -> None:
        """Apply records read after :meth:`rebuild_logs` wrote their sessions, next seq only
        (see :meth:`.rebuilds.Rebuilds.catch_up`)."""
        self.rebuilds.catch_up(items)
        self.store.evict()

    def rebuild_logs(
        self, logs: Mapping[str, Sequence[Record | Poison]], cause: str, chunk: int = 20_000
    ) -> int:
        """Project each session's whole log into its keys; returns the events applied (see
        :meth:`.rebuilds.Rebuilds.rebuild_logs`). The states it leaves cached are cut back to
        ``DSH_PROJECTOR_CACHE_SESSIONS`` after each call (a replay calls it per partition), so
        a whole-topic replay holds one partition's states at most, not the topic's."""
        applied = self.rebuilds.rebuild_logs(logs, cause, chunk)
        self.store.evict()
        return applied
