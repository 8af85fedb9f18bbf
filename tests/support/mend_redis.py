"""A stand-in for the Redis a failover's mend is handed on through (``projectors.runtime.
handover``): the store's client (redis-py's pipeline) and its link in one, holding the sets
and recording each round trip. For unit tests of the handover and the loop's take-over, with
the handover's clock in the test's hands (``handover_clock``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from projectors.runtime import handover


@dataclass
class MendRedis:
    sets: dict[str, set[bytes]] = field(default_factory=dict)
    trips: list[list[tuple[Any, ...]]] = field(default_factory=list)
    _queued: list[tuple[Any, ...]] = field(default_factory=list)
    away: bool = False  # every round trip fails, as with Redis down
    refuses_writes: bool = False  # reads answered, writes refused, as by a replica

    # --- the client's pipeline ---
    def pipeline(self, transaction: bool) -> MendRedis:
        return self

    def execute_command(self, *command: Any) -> None:
        self._queued.append(command)

    def execute(self) -> list[Any]:
        queued, self._queued = self._queued, []
        return self.round_trip(queued)

    # --- the link ---
    def round_trip(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        if self.away:
            raise redis.ConnectionError("Redis is away")
        if self.refuses_writes and any(c[0] != "SMEMBERS" for c in commands):
            raise redis.ReadOnlyError("You can't write against a read only replica.")
        self.trips.append(list(commands))
        return [self._run(*command) for command in commands]

    def submit(self, commands: list[Any]) -> None:
        return None  # a batch's pending replies: the tests never read them

    def _run(self, name: str, key: str, *members: str) -> Any:
        held = self.sets.setdefault(key, set())
        if name == "SMEMBERS":
            return set(held)
        encoded = {m.encode() for m in members}
        if name == "SADD":
            held |= encoded
        else:
            assert name == "SREM"
            held -= encoded
        return len(encoded)


def handover_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The handover's clock, as a list the test moves on: ``clock[0] += seconds``."""
    clock = [1000.0]
    monkeypatch.setattr(handover, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    return clock
