"""Prometheus metrics of the writer (the client has its own: ``producers.client_metrics``)."""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from dsh.vocabulary import BUILTIN_PROJECTION_TYPES, CORE_TYPES
from servicekit.metrics import LATENCY_BUCKETS as _LATENCY_BUCKETS

# Types outside the vocabulary are the clients' to choose (any ignorable type, any type of a
# rejected command): each would be a series of its own for good. The first few seen keep
# their name; the rest count as "other".
MAX_OTHER_TYPES = 64
_KNOWN_TYPES = CORE_TYPES | BUILTIN_PROJECTION_TYPES
_other_types: set[str] = set()


APPENDS = Counter(
    "dsh_writer_appends_total",
    "Events the writer handled, by event type and result (committed, rejected, duplicate); "
    f"types outside the vocabulary past the first {MAX_OTHER_TYPES} seen count as 'other'.",
    ["type", "result"],
)


@functools.lru_cache(maxsize=4096)
def appends(event_type: str, result: str) -> Any:
    """The child counter, looked up once per (type, result): ``labels()`` costs more than the
    increment on the writer's per-event path."""
    if event_type not in _KNOWN_TYPES and event_type not in _other_types:
        if len(_other_types) >= MAX_OTHER_TYPES:
            event_type = "other"
        else:
            _other_types.add(event_type)
    return APPENDS.labels(event_type, result)


REJECTED = Counter(
    "dsh_writer_rejected_commands_total",
    "Commands the writer rejected, by error class and code.",
    ["error", "code"],
)
WRITER_LATENCY = Histogram(
    "dsh_writer_append_latency_seconds",
    "From a command's record timestamp to the commit of the transaction that answers it.",
    buckets=_LATENCY_BUCKETS,
)
BATCH_COMMANDS = Histogram(
    "dsh_writer_batch_commands",
    "Commands per transaction.",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000),
)
TXN_COMMIT = Histogram(
    "dsh_writer_transaction_commit_seconds",
    "send_offsets_to_transaction + commit_transaction, per batch.",
    buckets=_LATENCY_BUCKETS,
)
TXN_PHASE = Histogram(
    "dsh_writer_transaction_phase_seconds",
    "Time per batch in each phase: validate (decode, core, produce), offsets "
    "(send_offsets_to_transaction), commit (commit_transaction); with commit overlap also "
    "flush (the batch's records acknowledged) and previous (waiting for the transaction "
    "before it to commit).",
    ["phase"],
    buckets=_LATENCY_BUCKETS,
)
PHASE_VALIDATE = TXN_PHASE.labels("validate")
PHASE_OFFSETS = TXN_PHASE.labels("offsets")
PHASE_COMMIT = TXN_PHASE.labels("commit")
PHASE_FLUSH = TXN_PHASE.labels("flush")
PHASE_PREVIOUS = TXN_PHASE.labels("previous")
COMMAND_WAIT = Histogram(
    "dsh_writer_command_wait_seconds",
    "From a command's record timestamp until the writer took it from the commands topic: "
    "the part of dsh_writer_append_latency_seconds before any transaction phase.",
    buckets=_LATENCY_BUCKETS,
)
GC_PAUSES = Histogram(
    "dsh_writer_gc_pause_seconds",
    "Cycle-collector runs in the writer process, by generation (2: a full collection).",
    ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
GC_CYCLIC_GARBAGE = Counter(
    "dsh_writer_gc_cyclic_garbage_objects_total",
    "Unreachable objects found when a recovery swept the frozen heap (DSH_WRITER_GC_FREEZE): "
    "more than zero means something makes reference cycles, which stay until the next sweep.",
)
TXN_ABORTS = Counter("dsh_writer_transaction_aborts_total", "Transactions aborted.")
TXN_PRODUCED_AGAIN = Counter(
    "dsh_writer_transactions_produced_again_total",
    "Aborted transactions whose records went out again in a new transaction, instead of a "
    "restore, because only the group's generation had moved.",
)
PRODUCER_REPLACEMENTS = Counter(
    "dsh_writer_producer_replacements_total",
    "New producers (same transactional id) after a fatal producer error that was no fencing.",
)
RESTORE_RETRIES = Counter(
    "dsh_writer_restore_retries_total", "Partition restores tried again after a Kafka error."
)
PARTITIONS_OWNED = Gauge("dsh_writer_partitions_owned", "Commands partitions this writer serves.")
RESTORE_SECONDS = Histogram(
    "dsh_writer_restore_seconds",
    "Time to restore one partition's sessions from the log.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
OFFSETS_WAIT_SECONDS = Histogram(
    "dsh_writer_offsets_wait_seconds",
    "Time an assignment or recovery waited for the committed command offsets to be stable "
    "(a previous owner's open transaction holds them until it ends).",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120),
)
OWNERS_FENCED = Counter(
    "dsh_writer_owners_fenced_total",
    "Transactional ids of writers that left the group with a transaction open, fenced by a "
    "new owner of their partitions so that it is aborted now.",
)
SNAPSHOTS = Counter(
    "dsh_writer_snapshots_total", "Session snapshots written, or skipped as too large.", ["result"]
)
PRODUCER_QUEUE_FULL = Counter(
    "dsh_writer_producer_queue_full_total",
    "Times a transaction filled the producer's queue (queue.buffering.max.*) and waited for "
    "the brokers to take its records before producing more.",
)
EVICTIONS = Counter(
    "dsh_writer_sessions_evicted_total",
    "Idle sessions dropped from memory to stay within DSH_WRITER_MAX_RESIDENT_*.",
)
RELOADS = Counter(
    "dsh_writer_sessions_reloaded_total",
    "Evicted sessions restored for a command, a read or a checkpoint's snapshot, by what was "
    "read: its snapshot alone, or events too.",
    ["source"],
)
EVICTED_SNAPSHOTTED = Counter(
    "dsh_writer_evicted_sessions_snapshotted_total",
    "Sessions a restore evicted with events no snapshot covered, snapshotted by a checkpoint "
    "without being made resident, so later checkpoints no longer name them.",
)
RELOAD_SECONDS = Histogram(
    "dsh_writer_session_reload_seconds",
    "Time to restore one evicted session from the topics.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RESIDENT_SESSIONS = Gauge(
    "dsh_writer_resident_sessions", "Sessions held in memory, by partition.", ["partition"]
)
RESIDENT_BYTES = Gauge(
    "dsh_writer_resident_bytes",
    "Logged bytes (encoded events) of the sessions held in memory, by partition.",
    ["partition"],
)
READS = Counter(
    "dsh_writer_reads_total",
    "Session reads answered (SessionClient.read), by result: served or refused.",
    ["result"],
)
for _result in ("served", "refused"):
    READS.labels(_result)  # from 0 at start-up, so a first-incident increase() can fire
DLQ = Counter("dsh_writer_dlq_total", "Command records sent to the DLQ (undecodable).")
