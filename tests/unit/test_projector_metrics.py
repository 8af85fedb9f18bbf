"""The projector's counters exist at 0 before anything happens (projectors.metrics.expose)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from projectors import metrics


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_every_counter_series_an_alert_reads_is_exposed_at_zero_from_the_start() -> None:
    projector = "exposed-at-start"
    assert _value("dsh_projector_events_total", projector=projector, result="poison") is None
    metrics.expose(projector)
    for result in ("applied", "duplicate", "gap", "blocked", "poison"):
        assert _value("dsh_projector_events_total", projector=projector, result=result) == 0.0
    for cause in ("gap", "redis-lost", "redis-failover", "replay"):
        assert _value("dsh_projector_rebuilds_total", projector=projector, cause=cause) == 0.0
    assert _value("dsh_projector_offset_commit_failures_total", projector=projector) == 0.0


def test_exposing_again_keeps_what_was_counted() -> None:
    projector = "exposed-twice"
    metrics.expose(projector)
    metrics.EVENTS.labels(projector, "applied").inc(3)
    metrics.expose(projector)
    assert _value("dsh_projector_events_total", projector=projector, result="applied") == 3.0
