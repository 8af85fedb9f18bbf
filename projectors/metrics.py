"""Prometheus metrics of the projectors (one set per process, labelled by projector)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter(
    "dsh_projector_events",
    "Events handled, by projector and result (applied, duplicate, gap, blocked, poison)",
    ["projector", "result"],
)
BATCH_SECONDS = Histogram(
    "dsh_projector_apply_seconds",
    "Time to plan and apply one batch in Redis (one pipeline round trip)",
    ["projector"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
LAG = Gauge("dsh_projector_lag", "Records behind the partition's end", ["projector", "partition"])
PARTITIONS = Gauge(
    "dsh_projector_partitions_owned", "Partitions this process applies", ["projector"]
)
BLOCKED = Gauge("dsh_projector_blocked_sessions", "Sessions blocked with a reason", ["projector"])
DLQ = Counter("dsh_projector_dlq", "Records sent to the DLQ", ["projector", "code"])
COMMIT_FAILURES = Counter(
    "dsh_projector_offset_commit_failures",
    "Offset commits that failed (the next owner re-applies their events, skipped as duplicates)",
    ["projector"],
)
REBUILDS = Counter(
    "dsh_projector_rebuilds", "Sessions rebuilt from the topic", ["projector", "cause"]
)
REBUILDS_ABANDONED = Counter(
    "dsh_projector_rebuilds_abandoned",
    "Partition rebuilds left to whoever applies the partition next: revoked, or stopping",
    ["projector"],
)
GC_PAUSES = Histogram(
    "dsh_projector_gc_pause_seconds",
    "Cycle-collector runs in the projector process, by generation (2: a full collection)",
    ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


RESULTS = ("applied", "duplicate", "gap", "blocked", "poison")
REBUILD_CAUSES = ("gap", "redis-lost", "redis-failover", "replay")


def expose(projector: str) -> None:
    """Every counter series of the projector, at 0 before anything happens. Prometheus sees
    no increase in a series whose first sample is already 1, so without this the first
    poison record or lost Redis of a process would never raise an ``increase()`` alert."""
    for result in RESULTS:
        EVENTS.labels(projector, result)
    for cause in REBUILD_CAUSES:
        REBUILDS.labels(projector, cause)
    COMMIT_FAILURES.labels(projector)
    REBUILDS_ABANDONED.labels(projector)
