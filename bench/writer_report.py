"""The writer benchmark's printout: the figures beside the raw ceiling of the same run."""

from __future__ import annotations

from typing import Any

from bench.stalls import describe
from bench.writer_metrics import PHASES
from bench.writer_paced import SLOW_MS


def by_generation(gc: dict[str, list[float]]) -> str:
    return ", ".join(f"{g}: {n:.0f}, {ms:.1f}" for g, (n, ms) in gc.items())


def lines(results: dict[str, Any], rate: float, warmup: float) -> list[str]:
    """What ``results`` say, a line a figure or a few of one phase."""
    raw = results["raw"]
    sustained = "append_async_events_per_s" in results
    out = []
    if sustained:
        out.append(
            f"writer: {results['append_async_events_per_s']:,.0f} events/s (append_async), "
            f"{results['append_many_x10_events_per_s']:,.0f} events/s (10 per command); "
            f"raw transactional producer {raw['events_per_s']:,.0f} records/s"
        )
    out.append(
        f"round trip at {rate:.0f}/s: p50 {results['round_trip_p50_ms']:.1f} ms, "
        f"p99 {results['round_trip_p99_ms']:.1f} ms; raw one-record transaction p50 "
        f"{raw['p50_ms']:.1f} ms, p99 {raw['p99_ms']:.1f} ms"
    )
    if "warmup_p50_ms" in results:
        out.append(
            f"  warm-up ({warmup:g} s at the same rate, not counted above): "
            f"p50 {results['warmup_p50_ms']:.1f} ms, p99 {results['warmup_p99_ms']:.1f} ms"
        )
    if "backlog_events" in results:
        out.append(
            f"  backlog drain (10 per command, no client running): "
            f"{results['backlog_events_per_s']:,.0f} events/s, writer CPU "
            f"{results['backlog_writer_cpu_us_per_event']:.0f} µs per event; its GC "
            "(collections, total ms) by generation: " + by_generation(results["backlog_gc"])
        )
    if sustained:
        for who in ("writer", "client"):
            out.append(
                f"  {who} CPU per event: "
                f"{results[f'append_async_{who}_cpu_us_per_event']:.0f} µs (1 per command), "
                f"{results[f'append_many_x10_{who}_cpu_us_per_event']:.0f} µs (10 per command)"
            )
    phases = results["paced_phase_mean_ms"]
    out.append(
        f"  while paced: {results['paced_mean_batch']:.1f} commands per transaction; mean "
        + ", ".join(f"{p} {phases[p]:.1f} ms" for p in PHASES)
        + f"; raw one-record transaction with offsets p50 {raw['offsets_p50_ms']:.1f} ms, "
        f"p99 {raw['offsets_p99_ms']:.1f} ms"
    )
    bounds = results["paced_phase_p99_bound_ms"]
    out.append(
        "  while paced, p99 of each phase at most: "
        + ", ".join(f"{p} {bounds[p]:.0f} ms" for p in PHASES)
        + "; from a command's timestamp to its commit at most "
        + f"{results['paced_writer_latency_p99_bound_ms']:.0f} ms, of which waiting to be "
        + f"taken at most {results['paced_command_wait_p99_bound_ms']:.0f} ms"
    )
    out.append("  " + describe(results["paced_slowest_second"], SLOW_MS))
    for what, key in (
        ("writer GC while paced", "paced_gc"),
        ("client GC while paced", "paced_client_gc"),
        ("writer GC over the whole run", "writer_gc"),
    ):
        out.append(
            f"  {what} (collections, total ms) by generation: " + by_generation(results[key])
        )
    out.append(
        f"  client's longest collection while paced: {results['paced_client_gc_longest_ms']:.1f} ms"
    )
    return out
