"""The partitions this instance applies, as they come and go: ``servicekit.kafka_clients.
Membership`` calls :meth:`Ownership.assign` and :meth:`Ownership.revoke` from inside ``poll``.

Rebalances are incremental: what stays owned keeps flowing, its batch in flight and its cached
sessions included. A partition Redis holds nothing of is replayed from its start, whatever
offsets the group committed (:mod:`projectors.marks`).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from projectors import metrics
from projectors.marks import Marks
from projectors.runtime.handover import Handover
from projectors.runtime.sessions import SessionStore

log = logging.getLogger("projectors")


def commit_start(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Commit the start of ``partitions`` (offset 0; once retention took it, out of range,
    which reads from the earliest) before they are marked as held in Redis again: should this
    process stop before it commits past what it replays, their next owner replays them too,
    rather than resuming at an offset committed before Redis lost them."""
    start = [TopicPartition(tp.topic, tp.partition, 0) for tp in partitions]
    consumer.commit(offsets=start, asynchronous=False)


class Ownership:
    def __init__(
        self,
        name: str,
        marks: Marks,
        store: SessionStore[Any],
        stats: Counter[str],
        settle: Callable[[set[int]], None],
        consumer: Callable[[], Consumer | None],
        handover: Handover,
    ) -> None:
        """``settle(partitions)``: finish and commit the batch in flight, before they go;
        ``consumer``: the one the partitions come to (None outside the loop); ``handover``:
        told of the partitions that come and go, whose failover mends it hands on."""
        self.name = name
        self.marks = marks
        self.store = store
        self.stats = stats
        self.settle = settle
        self.consumer = consumer
        self.handover = handover
        self._owned: set[int] = set()

    @property
    def partitions(self) -> frozenset[int]:
        return frozenset(self._owned)

    def owned(self) -> list[int]:
        return sorted(self._owned)

    def assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        # ``partitions`` are the ones added.
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
                consumer = self.consumer()
                if consumer is not None:
                    commit_start(consumer, fresh)
                self.marks.mark([tp.partition for tp in fresh])
        except redis.RedisError as exc:
            # Unknown: the sentinel check notices an empty Redis once it answers again.
            log.warning("projector %s: on assign: %s", self.name, exc)
        except KafkaException as exc:
            # Not marked: whoever is assigned them next finds them unmarked, and replays them.
            log.warning("projector %s: on assign, committing their start: %s", self.name, exc)
        self.stats["partitions_assigned"] += len(partitions)
        self._owned.update(tp.partition for tp in partitions)
        # Read by the loop's next round, not here inside poll(): a Redis error is tried again.
        self.handover.assigned(tp.partition for tp in partitions)
        metrics.PARTITIONS.labels(self.name).set(len(self._owned))
        # Explicitly: offsets set on the callback's list are ignored unless assigned so.
        return partitions

    def revoke(self, partitions: list[TopicPartition]) -> None:
        # Lost (membership expired) too: the batch in flight is still applied (harmless, the
        # apply is idempotent) but its offsets are refused; the next owner applies it again.
        revoked = {tp.partition for tp in partitions}
        self.settle(revoked)
        moved = self.store.forget_partitions(revoked)
        self.handover.revoked(revoked)
        self.handover.moved(moved)
        self.stats["partitions_revoked"] += len(partitions)
        for tp in partitions:
            self._owned.discard(tp.partition)
            # Not ours: a lag left behind would be reported beside the new owner's.
            with contextlib.suppress(KeyError):
                metrics.LAG.remove(self.name, str(tp.partition))
        metrics.PARTITIONS.labels(self.name).set(len(self._owned))
