"""Settings of the writer service (``DSH_WRITER_*``); Kafka itself is ``DSH_KAFKA_*``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings

KIB = 1024


class WriterSettings(StrictSettings):
    model_config = SettingsConfigDict(env_prefix="DSH_WRITER_", extra="forbid", frozen=True)

    group_id: str = "dsh-writer"
    # Empty: a fresh id per process. KIP-447 fences zombies through the group generation, so
    # the id need not follow partitions; a stable id per replica additionally lets a restarted
    # replica abort its predecessor's open transaction at once instead of at its timeout.
    transactional_id: str = ""
    batch_max_commands: Annotated[int, Field(ge=1)] = 1000
    poll_timeout_ms: Annotated[int, Field(ge=1)] = 100
    session_timeout_ms: Annotated[int, Field(ge=1000)] = 10_000
    # How often the group consumer heartbeats: it is how a writer learns that a rebalance has
    # begun (another writer left or joined), so during a deploy it bounds how long moving
    # partitions wait, twice per handover under the cooperative protocol. Capped at a third of
    # the session timeout. A heartbeat is one small request per writer per interval.
    heartbeat_interval_ms: Annotated[int, Field(ge=100)] = 500
    max_poll_interval_ms: Annotated[int, Field(ge=1000)] = 300_000
    transaction_timeout_ms: Annotated[int, Field(ge=1000)] = 30_000
    # A restore waits for transactions a dead owner left open; they end at its timeout.
    restore_timeout_ms: Annotated[int, Field(ge=1000)] = 120_000
    # After this long waiting for such a transaction, fence the writers that hold it and have
    # left the group, so it is aborted at once (producers/writer/takeover.py). 0: wait it out.
    fence_after_ms: Annotated[int, Field(ge=0)] = 2_000
    # Events per session between snapshots (0: never). A snapshot holds the whole session.
    snapshot_every: Annotated[int, Field(ge=0)] = 1000
    # Events per partition between checkpoints (0: never): a checkpoint snapshots every
    # session with uncovered events so a restore reads the events topic from there on.
    checkpoint_every: Annotated[int, Field(ge=0)] = 20_000
    # Both well under the broker's 1 MB default record limit: a reply carries every event of
    # its command plus seq, time and session id per event.
    max_event_bytes: Annotated[int, Field(ge=1)] = 256 * KIB
    max_command_bytes: Annotated[int, Field(ge=1)] = 512 * KIB
    max_snapshot_bytes: Annotated[int, Field(ge=1)] = 900 * KIB
    # Rejected requests remembered per partition, in slots of up to 64 (one or more per
    # transaction that rejected anything), so a retry gets the original rejection; kept on
    # the snapshots topic, so they survive restarts and takeovers. 0: validate retries again.
    rejection_slots: Annotated[int, Field(ge=0)] = 1024
    # How long produced records may wait within a transaction before they go out; commit
    # sends whatever waits. Longer spares CPU (fewer broker-thread wake-ups); shorter lets the
    # records travel while the offsets are sent, a round trip less per transaction.
    linger_ms: Annotated[int, Field(ge=0)] = 1
    # A transaction costs the broker a fixed amount of CPU (markers in every partition it
    # touched, coordinator writes) whatever it holds. A batch taken sooner than this after the
    # previous one waits the rest of the interval for more commands, capping transactions at
    # 1000/this per second under load; a command arriving after a quiet spell never waits.
    # 0: take what is there at once.
    min_transaction_interval_ms: Annotated[int, Field(ge=0, le=1000)] = 0
    # Build and produce each transaction while the one before it commits, on a second
    # producer (transactional id "<id>-1"): a command then waits for at most one commit
    # ahead of its own instead of a whole transaction. False: one producer, one at a time.
    overlap_commits: bool = True
    # Young-generation threshold of the cycle collector while serving (Python's default is
    # 700; 0 keeps it): see servicekit/gc_tuning.py.
    gc_threshold: Annotated[int, Field(ge=0)] = 50_000
    # After each young collection, move what survived it to the permanent generation
    # (gc.freeze), so no older collection ever walks the sessions' state, a stop of about a
    # second per 2.5 million objects (see writer.run). False: Python's own generations.
    gc_freeze: bool = True
    # A call into librdkafka still running this long past its own timeout ends the process
    # (exit code 70) for its supervisor to start afresh: librdkafka does not always keep the
    # timeouts of its transactional calls, and a writer blocked in one serves nothing and
    # holds its partitions (servicekit/watchdog.py). 0: wait for ever.
    stuck_call_grace_s: Annotated[float, Field(ge=0)] = 30.0
    metrics_port: Annotated[int, Field(ge=0)] = 9464  # 0: no /metrics server
    # Message-projection interpreters, "event/type=package.module:function,…" (the same spec
    # as DSH_PROJECTOR_PROJECTIONS): an event of a type missing here is rejected.
    projections: str = ""
    # Per-tenant session id prefixes (see producers/tenancy.py), e.g. "acme=acme-|shared-" and
    # "acme=<key>": a command must carry a tenant credential allowing its session id. Empty: off.
    tenant_prefixes: str = ""
    tenant_keys: SecretStr = SecretStr("")
    # Test-only fault injection, "stop-before-produce:<request id>" or
    # "stop-before-commit:<request id>": the process SIGSTOPs itself in the middle of the batch
    # that holds that request (before its records, or with its offsets sent), to make zombies
    # and dead owners with open transactions on purpose. "hang-in-send-offsets-after:<s>": the
    # first offsets sent that many seconds after start never return (a stuck librdkafka call).
    failpoint: str = ""
