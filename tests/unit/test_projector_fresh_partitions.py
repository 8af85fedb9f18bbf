"""A partition Redis holds nothing of is replayed from its start, and marked as held once
more. Its start is committed before the mark: should the process stop before it commits past
what it replays, the next owner sees the mark and resumes from the commit, which must then be
the start, not an offset committed before Redis lost the partition. Drives ``Ownership``
with stand-ins for the consumer and the marks (no broker, no Redis)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from projectors.keys import Keys
from projectors.runtime.handover import Handover
from projectors.runtime.ownership import Ownership

TOPIC = "t.events"


@dataclass
class _World:
    """What happened, in order, across the consumer and Redis."""

    steps: list[tuple[str, Any]] = field(default_factory=list)
    refuse_commits: bool = False


@dataclass
class _Consumer:
    world: _World

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not asynchronous
        if self.world.refuse_commits:
            raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
        self.world.steps.append(("commit", sorted((tp.partition, tp.offset) for tp in offsets)))


@dataclass
class _Marks:
    world: _World
    held: set[int]

    def unmarked(self, partitions: list[int]) -> set[int]:
        return set(partitions) - self.held

    def mark(self, partitions: list[int]) -> None:
        self.world.steps.append(("mark", sorted(partitions)))
        self.held.update(partitions)


def _ownership(world: _World, held: set[int]) -> Ownership:
    marks: Any = _Marks(world, held)
    consumer = _Consumer(world)
    handover = Handover("surface", Keys(), None)  # type: ignore[arg-type]
    return Ownership("surface", marks, None, Counter(), lambda _: None, lambda: consumer, handover)  # type: ignore[arg-type, return-value]


def test_the_start_of_a_partition_redis_lost_is_committed_before_it_is_marked() -> None:
    world = _World()
    assigned = [TopicPartition(TOPIC, p, 500) for p in (0, 1, 2)]
    out = _ownership(world, held={1}).assign(assigned)
    assert [tp.offset for tp in out] == [OFFSET_BEGINNING, 500, OFFSET_BEGINNING]
    assert world.steps == [("commit", [(0, 0), (2, 0)]), ("mark", [0, 2])]


def test_a_start_that_could_not_be_committed_is_not_marked() -> None:
    world = _World(refuse_commits=True)
    out = _ownership(world, held=set()).assign([TopicPartition(TOPIC, 0, 500)])
    assert [tp.offset for tp in out] == [OFFSET_BEGINNING]  # replayed here all the same
    assert world.steps == []  # unmarked: the next owner replays it too
