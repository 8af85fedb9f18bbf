"""lua/apply.lua against a real Redis: exactly-once by seq, and the node-list replace."""

from __future__ import annotations

from typing import Any

import redis

from projectors.scripts import APPLY, BLOCK, load_all

META, LIST, STREAM = "t:{s}:meta", "t:{s}:nodes", "t:{s}:stream"


def apply(client: redis.Redis, seq: int, *ops: str | int) -> list[int]:
    reply: Any = client.evalsha(APPLY.sha, 3, META, LIST, STREAM, seq, *ops)
    return [int(x) for x in reply]


def test_apply_is_exactly_once_by_seq(redis_client: redis.Redis) -> None:
    load_all(redis_client)
    assert apply(redis_client, 0, "R", 2, 0) == [1, 0]
    assert apply(redis_client, 0, "R", 2, 0) == [0, 0]  # duplicate: skipped
    assert apply(redis_client, 2, "R", 2, 2) == [-1, 0]  # gap: refused, nothing written
    assert apply(redis_client, 1, "X", 3, "1-1", 1, "kind", "surface", "R", 2, 1) == [1, 1]
    assert redis_client.lrange(LIST, 0, -1) == [b"0", b"1"]
    assert redis_client.xlen(STREAM) == 1
    assert redis_client.hget(META, "applies") == b"2"
    redis_client.evalsha(BLOCK.sha, 1, META, 2, '{"code": "X"}')
    assert apply(redis_client, 2, "R", 2, 2) == [-2, 1]  # blocked: nothing applies
    assert redis_client.lrange(LIST, 0, -1) == [b"0", b"1"]


def test_a_replace_on_a_long_node_list(redis_client: redis.Redis) -> None:
    load_all(redis_client)
    nodes = list(range(0, 20_000, 2))  # 10,000 nodes: the tail is longer than Lua's C stack
    redis_client.rpush(LIST, *nodes)
    redis_client.hset(META, "applied", 20_000)
    assert apply(redis_client, 20_001, "L", 2, 2, 6, 20_001) == [1, 20_001]
    assert [int(n) for n in redis_client.lrange(LIST, 0, -1)] == [0, 20_001, *nodes[4:]]
    assert apply(redis_client, 20_002, "L", 2, 0, 0, 20_002) == [1, 20_002]  # one node: LSET
    assert apply(redis_client, 20_003, "L", 2, 20_002, 20_001, 20_003) == [1, 20_003]  # from 0
    assert [int(n) for n in redis_client.lrange(LIST, 0, -1)] == [20_003, *nodes[4:]]
