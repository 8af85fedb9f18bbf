"""Settings of a projector process (``DSH_PROJECTOR_*``); Kafka and Redis have their own."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings


class ProjectorSettings(StrictSettings):
    model_config = SettingsConfigDict(env_prefix="DSH_PROJECTOR_", extra="forbid", frozen=True)

    # One consumer group per projection; the projection name is appended.
    group_prefix: str = "dsh-projector"
    # Every Redis key starts with this, then the hash-tagged session id.
    key_prefix: str = "dsh"
    batch_size: int = 500
    poll_timeout_s: float = 0.2
    # How often the process checks that Redis still holds its sentinel (FLUSHALL detection).
    sentinel_interval_s: float = 1.0
    # Message-projection interpreters, "event/type=package.module:function,…". A type missing
    # here blocks every session that uses it, as the core would refuse to read it.
    projections: str = ""
    # Static group membership (Kafka's group.instance.id, e.g. a pod name): a restarted process
    # takes its partitions back at once instead of waiting out the dead member's session.
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    # How often the group consumer heartbeats: it is how an instance hears that another one
    # joined or left, so it bounds how long a moved partition waits (twice: revoked, then
    # assigned). Capped at a third of the session timeout; one small request per interval.
    heartbeat_interval_ms: Annotated[int, Field(ge=100)] = 500
    # 0 disables the Prometheus endpoint.
    metrics_port: int = 0
    # An offset commit (it has no timeout of its own) still waiting this long past 30 s ends
    # the process (exit code 70) for its supervisor to start afresh (servicekit/watchdog.py).
    # 0: wait for ever.
    stuck_call_grace_s: Annotated[float, Field(ge=0)] = 30.0
    # Sessions kept in memory between batches (their state is reloaded from Redis on a miss).
    # A surface entry holds every current message of its session: size this to the memory.
    cache_sessions: int = 2_000
    # Allocations between the garbage collector's young collections while a projector or a
    # replay runs (Python's default is 700; 0 keeps whatever the process has). A batch makes
    # tens of thousands of short-lived containers next to the long-lived cached states, and at
    # 700 the collector rescans them over and over: about a third of the CPU per event.
    gc_threshold: int = 50_000
    # Processes a whole-topic `dsh replay` forks, each rebuilding its share of the partitions
    # (a session lives on one partition, so the shares are independent). 0: one per CPU, at
    # most one per partition; 1: everything in the calling process.
    replay_workers: int = 0

    def group_id(self, projection: str) -> str:
        return f"{self.group_prefix}-{projection}"
