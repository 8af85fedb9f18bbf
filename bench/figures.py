"""How the benchmarks turn latency samples into figures. Each benchmark keeps the method its
published figures were measured with, so that runs stay comparable with them."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (the writer's and the restore benchmark's method)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def p50_p99_ms(seconds: list[float]) -> tuple[float, float]:
    """Median and 99th percentile (``statistics.quantiles``, exclusive) of samples in seconds,
    in ms to a tenth (the projector benchmark's method); at least two samples."""
    p99 = statistics.quantiles(seconds, n=100)[98]
    return round(statistics.median(seconds) * 1000, 1), round(p99 * 1000, 1)


def timed(fn: Callable[[], Any], trials: int) -> list[float]:
    """Seconds each of ``trials`` calls of ``fn`` took, one after another."""
    out = []
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out
