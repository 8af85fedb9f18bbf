"""Watching Redis between batches: the sentinel that tells that Redis lost its data (FLUSHALL,
an empty restart; the partitions are then replayed from the start, see
:mod:`projectors.marks`), and the gauges (lag, blocked sessions). The lag is kept for the
readiness check too."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from projectors import metrics
from projectors.marks import Marks
from projectors.runtime.ownership import commit_start
from projectors.runtime.sessions import SessionStore

log = logging.getLogger("projectors")
# Asked once per assignment, between batches: a coordinator away longer leaves the lag unknown
# (the projector not ready) until the next look.
_COMMITTED_TIMEOUT_S = 2.0


class RedisWatch:
    def __init__(
        self,
        name: str,
        interval_s: float,
        marks: Marks,
        store: SessionStore[Any],
        stats: Counter[str],
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.marks = marks
        self.store = store
        self.stats = stats
        self._next_check = 0.0
        self._replay_pending = False  # Redis lost its data; the seek to the start is to come
        # Records behind the ends of the assigned partitions at the last look; None until
        # every one of them has a known position and end.
        self.lag: int | None = None
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._committed: dict[int, int] = {}  # of the partitions not taken from yet

    def due(self) -> bool:
        return self._replay_pending or time.monotonic() >= self._next_check

    def housekeeping(self, consumer: Consumer) -> None:
        try:
            self._check_redis(consumer)
        except redis.RedisError as exc:  # the next round tries again; batches retry on their own
            log.warning("projector %s: housekeeping: %s", self.name, exc)

    def _check_redis(self, consumer: Consumer) -> None:
        now = time.monotonic()
        if now < self._next_check and not self._replay_pending:
            return
        self._next_check = now + self.interval_s
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
        self.store.cache.clear()
        try:
            assignment = consumer.assignment()
            for tp in assignment:
                consumer.seek(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))
            commit_start(consumer, assignment)  # before the marks: see commit_start
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

    def _positions(
        self, consumer: Consumer, assignment: list[TopicPartition]
    ) -> list[TopicPartition]:
        """Where the projector is in each partition: past its last record taken, or, in one it
        has taken nothing from yet (an idle one), the group's committed offset, asked once per
        assignment."""
        if frozenset(assignment) != self._assigned:
            self._assigned, self._committed = frozenset(assignment), {}
        positions = consumer.position(assignment) if assignment else []
        unknown = [tp for tp in positions if tp.offset < 0 and tp.partition not in self._committed]
        if unknown:
            for tp in consumer.committed(unknown, timeout=_COMMITTED_TIMEOUT_S):
                self._committed[tp.partition] = tp.offset
        return [
            tp
            if tp.offset >= 0
            else TopicPartition(tp.topic, tp.partition, self._committed[tp.partition])
            for tp in positions
        ]

    def _report_gauges(self, consumer: Consumer) -> None:
        try:
            assignment = consumer.assignment()
            total: int | None = 0
            for tp in self._positions(consumer, assignment):
                low, high = consumer.get_watermark_offsets(tp, cached=True)
                start = tp.offset if tp.offset >= 0 else low  # nothing committed: the start
                if start >= 0 and high >= 0:
                    lag = max(high - start, 0)
                    metrics.LAG.labels(self.name, str(tp.partition)).set(lag)
                    total = None if total is None else total + lag
                else:
                    total = None  # not fetched from yet
            self.lag = total
            metrics.BLOCKED.labels(self.name).set(self.store.client.scard(self.store.blocked_key))
        except Exception as exc:  # metrics never stop the projector
            log.debug("projector %s: gauges: %s", self.name, exc)
