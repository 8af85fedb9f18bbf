"""A failover's mend taken over at the loop's round (``Loop._take_over_mends``), before the
batch just read is submitted. The take-over's rebuild polls the group at its beats, where a
rebalance may revoke a partition; the batch's records were read before that, so it must neither
apply nor commit anything of the partition (its next owner applies it). Drives ``Loop._step``
with stand-ins for the consumer, the store, the planner and Redis (no broker, no Redis). A
take-over that fails is tried again later; only a Redis error makes the loop forget what it
cached."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from projectors.keys import Keys
from projectors.runtime.batches import Plan
from projectors.runtime.handover import REREAD_EVERY_S, Handover
from projectors.runtime.loop import Loop
from tests.support.mend_redis import MendRedis, handover_clock

TOPIC = "events"


@dataclass
class _Consumer:
    """Its poll serves the rebalance the test lines up: ``revoke`` goes, through the loop's
    callback as ``Ownership`` calls it."""

    loop: Any
    owned: list[int]
    revoke: set[int] = field(default_factory=set)
    commits: list[list[tuple[int, int]]] = field(default_factory=list)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p) for p in self.owned]

    def pause(self, partitions: list[TopicPartition]) -> None:
        pass

    def resume(self, partitions: list[TopicPartition]) -> None:
        pass

    def poll(self, timeout: float) -> None:
        if self.revoke:
            revoked, self.revoke = self.revoke, set()
            self.loop.settle_before_rebalance(revoked)
            self.loop.handover.revoked(revoked)
            self.owned = [p for p in self.owned if p not in revoked]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits.append(sorted((tp.partition, tp.offset) for tp in offsets))


@dataclass
class _Store:
    client: MendRedis
    link: MendRedis
    resets: int = 0
    behind_of: dict[int, set[str]] = field(default_factory=dict)  # what Redis holds behind
    unacked: list[set[str]] = field(default_factory=list)  # at each reset

    def behind(self, believed: Mapping[str, tuple[int, int]]) -> dict[int, set[str]]:
        return {p: sids & set(believed) for p, sids in self.behind_of.items()}

    def load(self, sessions: Mapping[str, int], inflight: Any) -> None:
        pass

    def reset(self, unacked: Collection[str] = ()) -> None:
        self.resets += 1
        self.unacked.append(set(unacked))


class _Planner:
    def plan(self, items: list[Any]) -> Plan:
        return Plan()


class _Poison:
    def deliver(self, dead: list[Any]) -> None:
        pass


@dataclass
class _Rebuilds:
    """The take-over's rebuild: it asks ``hold`` before each partition, as a beat does, and
    then meets ``error`` if any."""

    asked: list[tuple[int, bool]] = field(default_factory=list)
    error: Exception | None = None

    def rebuild(
        self,
        sessions: Mapping[int, set[str]],
        cause: str,
        hold: Callable[[int], bool],
        rebuilt: Callable[[int, set[str]], None],
    ) -> set[int]:
        abandoned = set()
        for partition in sessions:
            ours = hold(partition)
            self.asked.append((partition, ours))
            if not ours:
                abandoned.add(partition)
            elif self.error is not None:
                raise self.error
        return abandoned


def _loop(owned: list[int], handed_on: dict[int, set[bytes]]) -> tuple[Any, _Consumer]:
    loop: Any = object.__new__(Loop)
    redis = MendRedis({Keys().mend("surface", p): sids for p, sids in handed_on.items()})
    loop.name, loop.topic, loop.store = "surface", TOPIC, _Store(redis, redis)
    loop.planner, loop.poison, loop.rebuilds = _Planner(), _Poison(), _Rebuilds()
    loop.handover = Handover("surface", Keys(), loop.store)
    loop.inflight, loop._redo, loop._committed, loop._withheld = None, [], {}, set()
    loop._paused, loop._revocations, loop._lost, loop._stopping = None, 0, {}, None
    consumer = _Consumer(loop, owned)
    loop._consumer = consumer
    return loop, consumer


def test_a_batch_read_before_a_take_overs_rebalance_commits_nothing_of_what_it_revoked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop, consumer = _loop(owned=[0, 1], handed_on={0: {b"quiet-0"}})
    loop.handover.assigned([0, 1])  # a mend of partition 0 handed on with them
    monkeypatch.setattr(loop, "_finish_inflight", lambda consumer, wait=False: None)
    read = [Message(topic=TOPIC, partition=p, offset=o) for p, o in [(0, 7), (1, 40)]]
    consumer.revoke = {1}  # at the take-over's first poll: partition 1 moves
    loop._step(consumer, read, threading.Event())
    assert loop.rebuilds.asked == [(0, True)]  # the take-over went on with its partition

    # Partition 1's record is not submitted: it would load its session back into the cache
    # that forgot it, for a later failover's mend to rewrite from an older scan.
    batch = loop.inflight
    assert batch is not None and batch.messages == read[:1]
    assert loop._revoked_since(1, batch.serial), "the batch believes it read after the revocation"
    loop.commit(consumer, batch.messages, serial=batch.serial)
    assert consumer.commits == [[(0, 8)]]  # partition 1 is its next owner's


@pytest.mark.parametrize(
    ("error", "resets"),
    [
        # The link may hold unread replies, the cache states whose rewrite did not land.
        (redis.ConnectionError("Redis went away"), 1),
        # A scan that failed rewrote nothing: what the cache holds is Redis' own.
        (KafkaException(KafkaError(KafkaError._TRANSPORT)), 0),
    ],
)
def test_a_take_over_that_failed_is_tried_again_later_and_forgets_the_cache_for_redis_only(
    error: Exception, resets: int
) -> None:
    loop, _ = _loop(owned=[0], handed_on={0: {b"quiet-0"}})
    loop.handover.assigned([0])
    loop.rebuilds.error = error
    loop._take_over_mends()
    assert loop.store.resets == resets
    # What the rebuild cached before its write landed is not believed applied: still owed.
    assert loop.store.unacked == [{"quiet-0"}] * resets
    assert not loop.handover.due()  # not at the next round: a little later
    assert loop.handover.owed() == {0: {"quiet-0"}}  # still owed, not read again


def test_a_mend_handed_on_after_the_assignments_read_is_taken_over_at_the_minutes_reread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old owner, kept from Redis past max.poll.interval.ms, wrote its set late."""
    clock = handover_clock(monkeypatch)
    loop, consumer = _loop(owned=[0], handed_on={})
    monkeypatch.setattr(loop, "_finish_inflight", lambda consumer, wait=False: None)
    loop.handover.assigned([0])
    loop._step(consumer, [], threading.Event())
    assert loop.rebuilds.asked == []  # nothing handed on yet
    loop.store.client.sets[Keys().mend("surface", 0)] = {b"late"}
    clock[0] += REREAD_EVERY_S - 1
    loop._step(consumer, [], threading.Event())
    assert loop.rebuilds.asked == []
    clock[0] += 1
    loop._step(consumer, [], threading.Event())
    assert loop.rebuilds.asked == [(0, True)]


def test_sessions_of_a_partition_moved_while_redis_was_away_are_passed_on_at_the_next_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop, consumer = _loop(owned=[0], handed_on={})
    monkeypatch.setattr(loop, "_finish_inflight", lambda consumer, wait=False: None)
    loop.handover.assigned([0])
    loop._step(consumer, [], threading.Event())
    loop.handover.moved({"lost": (1, 7), "kept": (1, 7)})  # partition 1 went while Redis was away
    loop.store.behind_of = {1: {"lost"}}
    assert loop.handover.due()
    loop._step(consumer, [], threading.Event())
    assert loop.store.client.sets[Keys().mend("surface", 1)] == {b"lost"}
    assert loop.rebuilds.asked == []  # not ours to rebuild: the new owner's
    assert not loop.handover.due()


def test_a_pass_on_redis_does_not_take_is_kept_and_tried_again_later_the_cache_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop, consumer = _loop(owned=[0], handed_on={})
    monkeypatch.setattr(loop, "_finish_inflight", lambda consumer, wait=False: None)
    away = MendRedis(away=True)
    loop.store.client = away
    loop.handover.moved({"lost": (1, 7)})
    loop.store.behind_of = {1: {"lost"}}
    loop._step(consumer, [], threading.Event())
    assert loop.store.resets == 0  # the client failed, not the link: the cache still holds
    assert not loop.handover.due()  # a little later, not at every round
    away.away = False
    loop.handover.postpone(0)
    loop._step(consumer, [], threading.Event())
    assert away.sets[Keys().mend("surface", 1)] == {b"lost"}


def test_the_sessions_of_a_batch_redis_failed_are_not_believed_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop, consumer = _loop(owned=[0, 1], handed_on={})

    def away(messages: Any, serial: Any = None) -> Any:
        raise redis.ConnectionError("Redis is away")

    monkeypatch.setattr(loop, "submit", away)
    keys = [(0, b"a"), (1, b"b"), (1, b"\xff")]  # the last not UTF-8: poison, no session
    read = [Message(topic=TOPIC, partition=p, offset=7, key=k) for p, k in keys]
    stop = threading.Event()
    stop.set()  # raise at once rather than retry
    with pytest.raises(redis.ConnectionError):
        loop._step(consumer, read, stop)
    assert loop.store.unacked == [{"a", "b", "\ufffd"}]


def test_what_redis_never_took_back_is_named_at_the_end(caplog: pytest.LogCaptureFixture) -> None:
    loop, _ = _loop(owned=[0], handed_on={})
    loop.store.client = MendRedis(away=True)
    loop.handover.moved({"lost-1": (1, 7), "lost-3": (3, 2)})
    assert not loop._pass_on(last=True)
    with caplog.at_level(logging.WARNING, logger="projectors"):
        loop._left_unpassed()
    (line,) = [r.getMessage() for r in caplog.records if "dsh verify" in r.getMessage()]
    assert "2 session(s) of partition(s) 1, 3" in line and "lost-1, lost-3" in line
    assert not loop.handover.due()
