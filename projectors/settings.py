"""Settings of a projector process (``DSH_PROJECTOR_*``); Kafka and Redis have their own."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings, check_poll_interval


# Each field's docstring is its entry in docs/settings.md (`python -m cli settings`).
class ProjectorSettings(StrictSettings):
    """The projectors, `dsh project surface|transcript|audit`, and the commands that read or
    rebuild their read models (`dsh show`, `dsh tail`, `dsh verify`, `dsh replay`, and
    `dsh serve`, which reads the keys under `DSH_PROJECTOR_KEY_PREFIX`) (``DSH_PROJECTOR_*``)."""

    model_config = SettingsConfigDict(env_prefix="DSH_PROJECTOR_", extra="forbid", frozen=True)

    group_prefix: str = "dsh-projector"
    """Consumer groups are `<prefix>-<projection>`: one group per projection."""
    key_prefix: str = "dsh"
    """First part of every Redis key, before the hash-tagged session id."""
    batch_size: Annotated[int, Field(ge=1)] = 500
    """Most records applied to Redis in one batch."""
    poll_timeout_s: Annotated[float, Field(gt=0)] = 0.2
    """How long one poll of the events topic waits for records."""
    sentinel_interval_s: Annotated[float, Field(gt=0)] = 1.0
    """How often the process checks that Redis still holds its sentinel key; a lost one (an
    empty Redis) makes it replay its partitions."""
    projections: str = ""
    """Message-projection interpreters, `event/type=package.module:function,…`, the same as the
    writer's; a session that uses a type missing here is blocked on its surface. Only the
    surface projector runs them: the transcript and audit projectors apply any projection type
    the writer took."""
    instance_id: str | None = None
    """Static group membership (Kafka's `group.instance.id`, e.g. a pod name): a restarted
    process gets its partitions back without waiting for its old session to expire."""
    session_timeout_ms: Annotated[int, Field(ge=1_000)] = 10_000
    """Group session timeout: how long a projector that stopped heartbeating keeps its
    partitions."""
    heartbeat_interval_ms: Annotated[int, Field(ge=100)] = 500
    """How often the projector heartbeats its group, capped at a third of the session timeout;
    it bounds how long an instance takes to hear that another joined or left."""
    max_poll_interval_ms: Annotated[int, Field(ge=1_000)] = 300_000
    """Longest time between two polls of the group (Kafka's `max.poll.interval.ms`) before it
    takes the projector's partitions away; at least the session timeout."""
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 0
    """Port of the HTTP endpoints `/metrics` (Prometheus), `/livez` and `/readyz` (`0`:
    none)."""
    ready_max_lag: Annotated[int, Field(ge=0)] = 10_000
    """`/readyz` fails while the projector is more than this many records behind the ends of
    its partitions (summed over them), e.g. catching up after a start or a replay."""
    stuck_call_grace_s: Annotated[float, Field(ge=0)] = 30.0
    """An offset commit still waiting 30 s plus this long ends the process with exit code 70,
    for its supervisor to restart (`0`: wait for ever)."""
    cache_sessions: Annotated[int, Field(ge=0)] = 2_000
    """Sessions kept in memory between batches (others are reloaded from Redis). A surface
    entry holds every current message of its session: size it to the memory."""
    # A batch makes tens of thousands of short-lived containers beside the long-lived cached
    # states; at Python's 700 the collector rescans them over and over.
    gc_threshold: Annotated[int, Field(ge=0)] = 50_000
    """Young-generation threshold of Python's cycle collector while projecting or replaying
    (`0`: leave the process's own)."""
    replay_workers: Annotated[int, Field(ge=0)] = 0
    """Processes a whole-topic `dsh replay` forks, each rebuilding its share of the partitions:
    `0`: one per CPU, at most one per partition; `1`: all in the calling process."""

    @model_validator(mode="after")
    def _poll_interval_covers_the_session(self) -> ProjectorSettings:
        prefix = self.model_config.get("env_prefix", "")
        check_poll_interval(prefix, self.max_poll_interval_ms, self.session_timeout_ms)
        return self

    def group_id(self, projection: str) -> str:
        return f"{self.group_prefix}-{projection}"
