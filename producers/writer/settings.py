"""Settings of the writer service (``DSH_WRITER_*``); Kafka itself is ``DSH_KAFKA_*``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings, check_poll_interval

KIB = 1024
MIB = 1024 * KIB


# Each field's docstring is its entry in docs/settings.md (`python -m cli settings`): what a
# user sets it for, in a sentence or two; the why behind a default is in docs/operations.md.
class WriterSettings(StrictSettings):
    """The single-writer service, `dsh writer` (``DSH_WRITER_*``)."""

    model_config = SettingsConfigDict(env_prefix="DSH_WRITER_", extra="forbid", frozen=True)

    group_id: str = "dsh-writer"
    """Consumer group of the writers on the commands topic: every writer of one pipeline uses
    the same one."""
    # KIP-447 fences zombies through the group generation, so the id need not follow partitions.
    transactional_id: str = ""
    """Kafka transactional id of this writer (its second producer appends `-1`). Empty: a fresh
    id per process; a stable id per replica (e.g. the pod name) lets a restarted replica abort
    its predecessor's open transaction at once."""
    batch_max_commands: Annotated[int, Field(ge=1)] = 1000
    """Most commands validated and committed in one transaction."""
    # A read's reply alone may be 512 KiB, an append's events go out twice (events, reply):
    # without a cap, a batch of large commands or reads made transactions of hundreds of MiB,
    # held in the producer's queue and in the writer's memory until they committed.
    batch_max_bytes: Annotated[int, Field(ge=1)] = 16 * MIB
    """Bytes of records (events, replies, snapshots) after which a transaction takes no more
    commands: the rest of the batch goes in the next one."""
    poll_timeout_ms: Annotated[int, Field(ge=1)] = 100
    """How long one poll of the commands topic waits for records."""
    session_timeout_ms: Annotated[int, Field(ge=1000)] = 10_000
    """Group session timeout: how long a writer that stopped heartbeating keeps its partitions
    before the group gives them to another."""
    heartbeat_interval_ms: Annotated[int, Field(ge=100)] = 500
    """How often the writer heartbeats its group, capped at a third of the session timeout; it
    bounds how long a writer takes to hear that another joined or left."""
    max_poll_interval_ms: Annotated[int, Field(ge=1000)] = 300_000
    """Longest time between two polls before the group takes the writer's partitions away."""
    transaction_timeout_ms: Annotated[int, Field(ge=1000)] = 30_000
    """Kafka's `transaction.timeout.ms`: the broker aborts a transaction left open longer."""
    restore_timeout_ms: Annotated[int, Field(ge=1000)] = 120_000
    """How long restoring a partition may wait for transactions a previous owner left open."""
    fence_after_ms: Annotated[int, Field(ge=0)] = 2_000
    """A new owner waiting this long for a previous owner's open transaction fences that owner
    if it has left the group, which aborts the transaction at once. `0`: wait for its timeout."""
    snapshot_every: Annotated[int, Field(ge=0)] = 1000
    """Events of a session between two snapshots of it on the snapshots topic (`0`: never)."""
    checkpoint_every: Annotated[int, Field(ge=0)] = 20_000
    """Events of a partition between two checkpoints (`0`: never); a restore reads the events
    topic only from the last checkpoint on."""
    # Both limits well under the broker's 1 MB default record limit: a reply carries every
    # event of its command plus seq, time and session id per event.
    max_event_bytes: Annotated[int, Field(ge=1)] = 256 * KIB
    """Largest encoded event; a larger one is rejected with `EVENT_TOO_LARGE`."""
    max_command_bytes: Annotated[int, Field(ge=1)] = 512 * KIB
    """Largest encoded command; a larger one is rejected with `COMMAND_TOO_LARGE`."""
    max_snapshot_bytes: Annotated[int, Field(ge=1)] = 900 * KIB
    """Largest snapshot; a session whose snapshot is larger restores from its events alone,
    which checkpoints name so that a restore reads them from their start. Keep it under the
    broker's record size limit."""
    max_resident_sessions: Annotated[int, Field(ge=0)] = 0
    """Most sessions the writer keeps in memory, shared evenly by the partitions it owns (`0`:
    no limit). Past it, the least recently used are evicted (snapshotted first if need be)
    and restored from the snapshots and events topics when a command or a read comes for
    them."""
    # On by default: sessions end and new ones start, so an unbounded writer grows with every
    # session its partitions ever held (the soak's writers reached 0.8 GiB without it).
    max_resident_bytes: Annotated[int, Field(ge=0)] = 128 * MIB
    """Most logged bytes (the encoded events) of the sessions the writer keeps in memory,
    shared and evicted like `max_resident_sessions` (`0`: no limit); the process holds three
    to four times that in memory (docs/operations.md), about 0.5 GiB at this default."""
    rejection_slots: Annotated[int, Field(ge=0)] = 1024
    """Rejected requests remembered per partition, in slots of up to 64, so that a retry gets
    the original rejection even after a restart (`0`: retries are validated again)."""
    # Longer spares CPU (fewer broker-thread wake-ups); shorter lets the records travel while
    # the offsets are sent, a round trip less per transaction.
    linger_ms: Annotated[int, Field(ge=0)] = 1
    """How long produced records may wait inside a transaction before they are sent."""
    # A transaction costs the broker a fixed amount of CPU (markers in every partition it
    # touched, coordinator writes) whatever it holds; this caps them at 1000/interval per second.
    min_transaction_interval_ms: Annotated[int, Field(ge=0, le=1000)] = 0
    """Under load, a batch taken sooner than this after the previous one waits out the rest
    for more commands: fewer, larger transactions. A command after a quiet spell never waits."""
    overlap_commits: bool = True
    """Build and produce each transaction while the previous one commits, on a second producer;
    `false`: one producer, one transaction at a time."""
    # Handing a commit to the other lane costs a flush and a thread switch, about a Kafka round
    # trip on a busy machine: worth it only when another batch is coming to build meanwhile.
    inline_commit_max_commands: Annotated[int, Field(ge=0)] = 4
    """With overlap, a batch of at most this many commands taken while no transaction commits
    is committed at once on the writer's own thread. `0`: every batch commits on the commit
    thread."""
    gc_threshold: Annotated[int, Field(ge=0)] = 50_000
    """Young-generation threshold of Python's cycle collector while serving (`0`: Python's own,
    700)."""
    gc_freeze: bool = True
    """After each young collection, move what survived to Python's permanent generation, so no
    older collection walks the sessions' state; `false`: Python's own generations."""
    stuck_call_grace_s: Annotated[float, Field(ge=0)] = 30.0
    """A transactional Kafka call still running this long past its timeout ends the process
    with exit code 70, for its supervisor to restart (`0`: wait for ever)."""
    metrics_port: Annotated[int, Field(ge=0)] = 9464
    """Port of the HTTP endpoints `/metrics` (Prometheus), `/livez` and `/readyz` (`0`:
    none)."""
    projections: str = ""
    """Message-projection interpreters, `event/type=package.module:function,…`; an event of a
    projection type with no interpreter here is rejected. The projectors need the same."""
    tenant_prefixes: str = ""
    """Session id prefixes each tenant may write, `tenant=prefix|prefix,…`. Empty: no tenant
    check."""
    tenant_keys: SecretStr = SecretStr("")
    """Each tenant's key, `tenant=key,…`, which its commands' credential must be made with."""
    # "stop-before-produce:<request id>" or "stop-before-commit:<request id>": the process
    # SIGSTOPs itself in the batch holding that request (before its records, or with its offsets
    # sent), to make zombies and dead owners with open transactions on purpose.
    # "hang-in-send-offsets-after:<s>": the first offsets sent that many seconds after start never
    # return (a stuck librdkafka call).
    failpoint: str = ""
    """For tests only: makes the writer stop or hang at a given point, to stage faults. Leave
    it empty."""

    @model_validator(mode="after")
    def _poll_interval_covers_the_session(self) -> WriterSettings:
        prefix = self.model_config.get("env_prefix", "")
        check_poll_interval(prefix, self.max_poll_interval_ms, self.session_timeout_ms)
        return self
