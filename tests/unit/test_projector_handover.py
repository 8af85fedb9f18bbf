"""A failover's mend handed on through Redis (``Handover``): what it writes when a mend starts
and as it ends, and that a partition assigned costs one read, at the loop's next round, not one
per batch. Redis is a stand-in that records the commands sent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from projectors.keys import Keys
from projectors.runtime.handover import REREAD_EVERY_S, Handover
from tests.support.mend_redis import MendRedis, handover_clock


@dataclass
class _Store:
    client: MendRedis
    link: MendRedis
    asked: list[dict[str, tuple[int, int]]] = field(default_factory=list)  # behind()'s reads

    def behind(self, believed: Mapping[str, tuple[int, int]]) -> dict[int, set[str]]:
        self.asked.append(dict(believed))
        return {}


def handover(redis: MendRedis) -> Handover:
    return Handover("surface", Keys(), _Store(redis, redis))  # type: ignore[arg-type]


def test_a_mend_is_written_down_before_it_starts_and_each_partition_leaves_once_rebuilt() -> None:
    redis = MendRedis()
    h = handover(redis)
    h.record({0: {"b", "a"}, 3: {"c"}})
    assert redis.trips == [
        [("SADD", "dsh:mend:surface:0", "a", "b"), ("SADD", "dsh:mend:surface:3", "c")]
    ]
    h.settled(0, {"a", "b"})
    assert redis.trips[-1] == [("SREM", "dsh:mend:surface:0", "a", "b")]
    assert redis.sets == {"dsh:mend:surface:0": set(), "dsh:mend:surface:3": {b"c"}}


def test_partitions_assigned_are_read_once_at_the_next_round_and_what_goes_is_left() -> None:
    redis = MendRedis(sets={"dsh:mend:surface:1": {b"s-1"}, "dsh:mend:surface:2": {b"s-2"}})
    h = handover(redis)
    assert not h.due()  # nothing assigned: a round asks nothing of Redis
    h.assigned([0, 1, 2])
    assert h.due() and not redis.trips  # noted inside poll(), read later
    assert h.owed() == {1: {"s-1"}, 2: {"s-2"}}
    assert len(redis.trips) == 1  # one round trip for the three partitions
    h.revoked({2})  # its next owner reads what is left of it
    assert h.owed() == {1: {"s-1"}} and len(redis.trips) == 1  # not read again
    h.settled(1, {"s-1"})
    assert not h.due() and h.owed() == {}
    assert redis.sets["dsh:mend:surface:2"] == {b"s-2"}


def test_the_sets_of_the_partitions_owned_are_read_again_every_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An old owner that Redis kept away past max.poll.interval.ms writes its set after the
    partition moved: the new owner has read it already, and reads it again a minute later."""
    clock = handover_clock(monkeypatch)
    redis = MendRedis()
    h = handover(redis)
    h.assigned([0, 1, 2])
    assert h.owed() == {} and len(redis.trips) == 1
    redis.sets["dsh:mend:surface:1"] = {b"late"}  # the old owner's write, after that read
    clock[0] += REREAD_EVERY_S - 1
    assert not h.due()  # a round between rereads asks nothing of Redis
    clock[0] += 1
    assert h.due()
    assert h.owed() == {1: {"late"}}
    assert redis.trips[-1] == [("SMEMBERS", f"dsh:mend:surface:{p}") for p in (0, 1, 2)]
    h.settled(1, {"late"})
    h.revoked({2})  # no longer owned: no longer read
    clock[0] += REREAD_EVERY_S
    assert h.due() and h.owed() == {}
    assert redis.trips[-1] == [("SMEMBERS", f"dsh:mend:surface:{p}") for p in (0, 1)]
    h.revoked({0, 1})
    clock[0] += REREAD_EVERY_S
    assert not h.due()  # nothing owned, nothing to read


def test_partitions_assigned_between_rereads_do_not_put_off_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = handover_clock(monkeypatch)
    redis = MendRedis()
    h = handover(redis)
    h.assigned([0])
    h.owed()
    redis.sets["dsh:mend:surface:0"] = {b"late"}
    for partition in (1, 2):  # an assignment every 25 s: each read at the next round
        clock[0] += 25
        h.assigned([partition])
        assert h.owed() == {}
        assert redis.trips[-1] == [("SMEMBERS", f"dsh:mend:surface:{partition}")]
    clock[0] += 10  # a minute after partition 0 was read
    assert h.due() and h.owed() == {0: {"late"}}


def test_a_failed_reread_is_tried_again_a_minute_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle projector during a Redis outage: not a failing read every round."""
    clock = handover_clock(monkeypatch)
    redis = MendRedis()
    h = handover(redis)
    h.assigned([0])
    h.owed()
    clock[0] += REREAD_EVERY_S
    redis.away = True
    assert h.due()
    with pytest.raises(RedisConnectionError):
        h.owed()
    assert not h.due()
    h.assigned([1])  # an assignment's read is tried again at the next round
    assert h.due()
    with pytest.raises(RedisConnectionError):
        h.owed()
    assert h.due()


def test_what_was_believed_of_a_moved_session_keeps_its_highest_seq() -> None:
    h = handover(MendRedis())
    assert not h.due()
    h.moved({"s": (1, 7)})
    h.moved({"s": (1, 4), "t": (2, 2)})  # read back from a Redis that had lost the writes
    assert h.due()
    assert h._moved == {"s": (1, 7), "t": (2, 2)}


def test_a_pass_on_is_only_read_from_a_redis_that_takes_writes() -> None:
    """An old primary cut off from its replicas answers reads with the writes a failover is
    about to lose, but refuses writes: nothing is read, passed on nor forgotten."""
    redis = MendRedis(refuses_writes=True)
    store = _Store(redis, redis)
    h = Handover("surface", Keys(), store)  # type: ignore[arg-type]
    h.moved({"s": (1, 7)})
    with pytest.raises(RedisConnectionError):  # READONLY: the primary is now a replica
        h.pass_on()
    assert store.asked == []  # the probe write failed before any read
    assert h._moved == {"s": (1, 7)}
    redis.refuses_writes = False
    assert h.pass_on() == {}
    assert store.asked == [{"s": (1, 7)}] and h._moved == {}


def test_what_could_not_be_passed_on_is_named_at_the_end() -> None:
    h = handover(MendRedis())
    h.moved({"s": (1, 7), "t": (1, 2), "u": (3, 4)})
    assert h.drop_moved() == {1: {"s", "t"}, 3: {"u"}}
    assert not h.due() and h.drop_moved() == {}
