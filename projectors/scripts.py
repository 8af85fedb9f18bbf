"""The Lua scripts, loaded once per Redis (on every primary of a cluster) and called by SHA; a
Redis that lost them (restart, SCRIPT FLUSH, a promoted replica) gets them again and what it
refused is re-sent (``projectors.batch_io``), which is safe because applying is idempotent."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.cluster import RedisCluster


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        # Computed once: every applied event names its script by this SHA.
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())

    def load(self, client: redis.Redis | RedisCluster) -> None:
        client.script_load(self.source)  # a cluster client loads it on every primary


def _read(name: str) -> Script:
    return Script(name, (Path(__file__).parent / "lua" / name).read_text(encoding="utf-8"))


APPLY = _read("apply.lua")
BLOCK = _read("block.lua")
ALL = (APPLY, BLOCK)


def load_all(client: redis.Redis | RedisCluster) -> None:
    for script in ALL:
        script.load(client)
