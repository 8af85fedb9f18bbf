"""Single-append round trips through the writer at a steady rate, counted after a warm-up at
the same rate, with what the writer's transactions were like meanwhile and the slowest
second beside the machine's stalls in it."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from bench.figures import percentile
from bench.pacing import paced_latency, timed_paced
from bench.stalls import ClientGcPauses, PressureSampler, settle, slowest_second
from bench.workload import message
from bench.writer_metrics import scrape, transactions
from producers import SessionClient

SLOW_MS = 50.0  # issue 5's p99 target for the round trip at 500/s


def paced_phase(
    client: SessionClient,
    metrics_port: int,
    sessions: list[str],
    rate: float,
    seconds: float,
    warmup: float,
) -> dict[str, Any]:
    """``rate`` appends/s for ``warmup`` s (reported apart), then for ``seconds`` counted."""

    def one_append(i: int) -> Future[Any]:
        return client.append_async(
            sessions[i % len(sessions)], "user/message", message(i), surface_op="append"
        )

    results: dict[str, Any] = {}
    settle()
    if warmup > 0:  # the first writes to brand-new partitions are slow at the broker
        warm = paced_latency(one_append, rate, warmup)
        results["warmup_p50_ms"] = percentile(warm, 0.5)
        results["warmup_p99_ms"] = percentile(warm, 0.99)
    before = scrape(metrics_port)
    with ClientGcPauses() as client_gc, PressureSampler() as pressure:
        timed = timed_paced(one_append, rate, seconds)
    lat = [ms for _, ms in timed]
    results["paced_slowest_second"] = slowest_second(timed, pressure, SLOW_MS)
    results["paced_client_gc"] = client_gc.by_generation
    results["paced_client_gc_longest_ms"] = client_gc.longest_ms
    results["round_trip_p50_ms"] = percentile(lat, 0.5)
    results["round_trip_p99_ms"] = percentile(lat, 0.99)
    after = scrape(metrics_port)
    results.update({f"paced_{k}": v for k, v in transactions(before, after).items()})
    return results
