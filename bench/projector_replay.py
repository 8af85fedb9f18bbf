"""Whole-topic replays: records/s of each projection rebuilding its read model from the
events topic, in forked workers (one per CPU) and in one process."""

from __future__ import annotations

import dsh
from bench.projector_throughput import publish
from bench.redis_keys import delete_prefix, settings_for
from bench.stack import fresh_topics, run_id
from bench.workload import interleaved
from cli.wiring import build_runtime
from projectors.replay import replay
from servicekit.settings import KafkaSettings, RedisSettings

PROJECTIONS = ("surface", "transcript", "audit")


def replay_rate(
    kafka: KafkaSettings, redis_settings: RedisSettings, names: tuple[str, ...], workers: int = 0
) -> float:
    """Records/s of a whole-topic replay; ``workers`` as DSH_PROJECTOR_REPLAY_WORKERS (0: one
    forked worker per CPU, 1: in this process)."""
    run = run_id()
    settings = settings_for(run, replay_workers=workers)
    runtimes = [build_runtime(n, kafka, redis_settings, settings) for n in names]
    result = replay(kafka, runtimes)
    delete_prefix(runtimes[0].redis, f"bench-{run}")
    return result.records_per_second


def replay_rates(kafka: KafkaSettings, redis_settings: RedisSettings, label: str) -> dict[str, int]:
    """``replay_{label}NAME_records_per_s`` of each projection, then of the surface in one
    process (``replay_{label}surface_one_process_records_per_s``)."""
    out = {
        f"replay_{label}{name}_records_per_s": round(replay_rate(kafka, redis_settings, (name,)))
        for name in PROJECTIONS
    }
    out[f"replay_{label}surface_one_process_records_per_s"] = round(
        replay_rate(kafka, redis_settings, ("surface",), workers=1)
    )
    return out


def large_replays(
    bootstrap: str,
    partitions: int,
    copies: int,
    redis_settings: RedisSettings,
    sessions: list[dsh.Session],
) -> dict[str, int]:
    """Replay rates over a topic of ``copies`` copies of the workload (the copies' sessions
    renamed, interleaved as in the small topic)."""
    kafka = fresh_topics(bootstrap, partitions)
    records = interleaved(sessions, copies)
    publish(kafka, records)
    return {"replay_large_records": len(records), **replay_rates(kafka, redis_settings, "large_")}
