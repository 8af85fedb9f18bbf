"""The projector benchmark's raw ceiling: the writes a projection makes for the workload,
sent as plain pipelined Redis commands from Python in the same run."""

from __future__ import annotations

import time
from typing import Any

from bench.redis_keys import delete_prefix, settings_for
from bench.stack import run_id
from cli.wiring import build_runtime
from projectors.records import decode
from projectors.runtime import Runtime
from servicekit.settings import KafkaSettings, RedisSettings

# A planned op → the plain command that does the same, and how many of its arguments follow
# the key; "X" (XADD) carries its own count, "L" (a replace) is not in the workload.
PLAIN = {"H": ("HSET", 2), "A": ("HSET", 2), "D": ("HDEL", 1), "R": ("RPUSH", 1)}


def plain_commands(ops: list[Any], keys: list[str], seq: int) -> list[tuple[Any, ...]]:
    """A projection's planned ops for one event as the Redis commands that do the same."""
    commands: list[tuple[Any, ...]] = []
    i = 0
    while i < len(ops):
        op, key = ops[i], keys[int(ops[i + 1]) - 1]
        if op in PLAIN:
            name, n = PLAIN[op]
            commands.append((name, key, *ops[i + 2 : i + 2 + n]))
            i += 2 + n
        elif op == "L":
            raise AssertionError("the benchmark workload has no replaces")
        else:
            n = int(ops[i + 3])
            commands.append(("XADD", key, ops[i + 2], *ops[i + 4 : i + 4 + 2 * n]))
            i += 4 + 2 * n
    commands.append(("HSET", keys[0], "applied", seq))
    return commands


def raw_write(
    kafka: KafkaSettings,
    redis_settings: RedisSettings,
    name: str,
    values: list[tuple[str, bytes]],
    batch: int = 1000,
) -> float:
    """The same keys and values written with plain pipelined commands: no decoding, no
    planning, no script — what Redis alone costs for this projection's writes."""
    run = run_id()
    runtime: Runtime[Any] = build_runtime(name, kafka, redis_settings, settings_for(run))
    projection = runtime.projection
    states: dict[str, Any] = {}
    commands: list[list[tuple[Any, ...]]] = []
    for offset, (sid, value) in enumerate(values):
        record = decode(sid.encode(), value, 0, offset)
        state = states.setdefault(sid, projection.fresh())
        ops = projection.plan(state, record.event)  # type: ignore[union-attr]
        commands.append(plain_commands(ops, projection.all_keys(sid), record.seq))  # type: ignore[union-attr]
    client = runtime.redis
    started = time.perf_counter()
    for i in range(0, len(commands), batch):
        pipe = client.pipeline(transaction=False)
        for event_commands in commands[i : i + batch]:
            for command in event_commands:
                pipe.execute_command(*command)
        pipe.execute()
    seconds = time.perf_counter() - started
    delete_prefix(client, f"bench-{run}")
    return len(values) / seconds
