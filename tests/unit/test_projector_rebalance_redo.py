"""A batch in flight that fails to settle at a rebalance is not committed. Its records on the
partitions that go are the next owner's (it resumes from the last commit); the ones on the
partitions that stay go again here, first, since the consumer has moved past them and the
next commit would pass them by. Drives ``Loop`` with stand-ins for the consumer, the store
and Redis (no broker, no Redis)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition

from projectors.keys import Keys
from projectors.runtime.handover import Handover
from projectors.runtime.loop import Loop

TOPIC = "events"


def _record(partition: int, offset: int) -> Message:
    return Message(topic=TOPIC, partition=partition, offset=offset, key=f"s-{partition}".encode())


@dataclass
class _Consumer:
    owned: list[int]

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p) for p in self.owned]


@dataclass
class _Store:
    resets: int = 0
    unacked: set[str] = field(default_factory=set)

    def reset(self, unacked: Collection[str] = ()) -> None:
        self.resets += 1
        self.unacked |= set(unacked)


@dataclass
class _Batch:
    messages: list[Message]


@dataclass
class _Calls:
    submitted: list[list[Message]] = field(default_factory=list)


def _loop(monkeypatch: pytest.MonkeyPatch, consumer: _Consumer) -> tuple[Any, _Calls]:
    loop: Any = object.__new__(Loop)
    calls = _Calls()
    loop.name, loop.store, loop._redo, loop._consumer = "surface", _Store(), [], consumer
    loop.inflight = None
    loop._paused, loop._revocations, loop._lost = None, 0, {}
    loop.handover = Handover("surface", Keys(), loop.store)  # nothing handed on: no I/O

    def submit(messages: list[Message], serial: int | None = None) -> _Batch:
        calls.submitted.append(list(messages))
        return _Batch(list(messages))

    monkeypatch.setattr(loop, "submit", submit)
    monkeypatch.setattr(loop, "_finish_inflight", lambda consumer, wait=False: None)
    return loop, calls


def test_the_records_of_a_batch_that_failed_at_a_rebalance_go_again_for_the_kept_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = _Consumer(owned=[0, 1])
    loop, calls = _loop(monkeypatch, consumer)
    failed = [_record(0, 10), _record(1, 20), _record(0, 11)]
    loop.inflight = _Batch(failed)

    def redis_gone(batch: Any, rebuild: bool = True) -> None:
        raise ConnectionError("Redis went away")

    monkeypatch.setattr(loop, "settle", redis_gone)
    loop.settle_before_rebalance({1})
    assert loop.inflight is None and loop.store.resets == 1  # the cache may be ahead of Redis
    # Not believed applied: their records go again, here or at partition 1's next owner.
    assert loop.store.unacked == {"s-0", "s-1"}

    consumer.owned = [0]  # partition 1 was revoked: its next owner applies offset 20
    monkeypatch.setattr(loop, "_finish_inflight", lambda consumer, wait=False: None)
    fetched_since = [_record(0, 12)]
    loop._step(consumer, fetched_since, threading.Event())
    ((submitted,),) = [calls.submitted]
    assert [(m.partition(), m.offset()) for m in submitted] == [(0, 10), (0, 11), (0, 12)]
    loop._step(consumer, [_record(0, 13)], threading.Event())
    assert [m.offset() for m in calls.submitted[-1]] == [13]  # once only
