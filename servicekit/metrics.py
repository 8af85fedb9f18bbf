"""What the services' Prometheus metrics share."""

from __future__ import annotations

# Seconds: from a millisecond round trip to a stuck one.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
