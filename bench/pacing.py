"""Open-loop pacing: one operation every 1/rate s, whatever the ones before it are doing, and
each one's latency; the round trips of the writer benchmark and of its raw ceiling."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

Submit = Callable[[int], Future[Any]]


def paced_latency(submit: Submit, rate: float, seconds: float) -> list[float]:
    """Open loop: one operation every 1/rate s; returns each one's latency in ms."""
    return [ms for _, ms in timed_paced(submit, rate, seconds)]


def timed_paced(submit: Submit, rate: float, seconds: float) -> list[tuple[float, float]]:
    """As :func:`paced_latency`, with each operation's send time (``time.monotonic()``)."""
    latencies: list[tuple[float, float]] = []
    lock = threading.Lock()
    futures = []
    interval = 1.0 / rate
    start = time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        target = start + i * interval
        delay = target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent = time.monotonic()
        fut = submit(i)

        def record(_f: Future[Any], sent: float = sent) -> None:
            with lock:
                latencies.append((sent, (time.monotonic() - sent) * 1000))

        fut.add_done_callback(record)
        futures.append(fut)
    for f in futures:
        f.result(60)
    return latencies
