"""Prometheus metrics of ``SessionClient`` (the writer's are ``producers.writer.metrics``)."""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Histogram

from servicekit.metrics import LATENCY_BUCKETS

CLIENT_ROUND_TRIP = Histogram(
    "dsh_client_append_seconds",
    "SessionClient: from handing a command to Kafka to receiving its reply.",
    ["result"],
    buckets=LATENCY_BUCKETS,
)


@functools.lru_cache(maxsize=8)
def round_trip(result: str) -> Any:
    return CLIENT_ROUND_TRIP.labels(result)
