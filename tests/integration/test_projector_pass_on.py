"""A partition that moved while Redis was away: its old owner alone knows what it had applied
there, and once Redis answers it hands the sessions Redis holds behind on to the new owner,
through the partition's mend set (``Handover.pass_on``). A real Redis; no Kafka needed."""

from __future__ import annotations

from typing import Any

import redis

from projectors.keys import Keys
from projectors.runtime.handover import Handover
from projectors.runtime.sessions import Entry, SessionStore
from projectors.transcript import TranscriptProjection

KEYS = Keys()
PROJECTION = TranscriptProjection(KEYS)


def _applied(applied: int) -> Any:
    return PROJECTION.load([str(applied).encode(), []])


def test_sessions_of_a_partition_moved_while_redis_was_away_are_handed_on_if_behind(
    redis_client: redis.Redis,
) -> None:
    name = PROJECTION.name
    # Redis after the failover: "lost" lacks its last writes, "kept" has them, "blocked" is
    # behind but blocked (its rebuild would block it again), "gone" lost everything.
    redis_client.hset(KEYS.meta(name, "lost"), "applied", 3)
    redis_client.hset(KEYS.meta(name, "kept"), "applied", 7)
    redis_client.hset(KEYS.meta(name, "blocked"), mapping={"applied": 3, "blocked": "poison"})
    redis_client.hset(KEYS.meta(name, "mine"), "applied", 1)
    store = SessionStore(PROJECTION, redis_client, keep=10)
    handover = Handover(name, KEYS, store)
    handover.assigned([0, 2, 3])
    handover.owed()
    believed = {"lost": (7, 2), "kept": (7, 2), "blocked": (7, 3), "gone": (5, 3), "mine": (4, 0)}
    for sid, (applied, partition) in believed.items():
        store.cache[sid] = Entry(_applied(applied), partition=partition)
    store.reset()  # the batch failed: Redis went away

    # Partitions 2 and 3 move while it is away; 0 stays, its session mended by this process.
    moved = store.forget_partitions({2, 3})
    handover.revoked({2, 3})
    handover.moved(moved)
    assert store.unconfirmed == {"mine": (0, 4)}
    assert handover.due()

    assert handover.pass_on() == {2: {"lost"}, 3: {"gone"}}
    assert redis_client.smembers(KEYS.mend(name, 2)) == {b"lost"}
    assert redis_client.smembers(KEYS.mend(name, 3)) == {b"gone"}
    assert not redis_client.exists(KEYS.mend(name, 0))  # its own mend is _mend_behind's
    assert not handover.due() and handover.pass_on() == {}
