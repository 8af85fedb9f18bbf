"""The writer's per-type counter has a bounded number of series: event types outside the
vocabulary are the clients' to choose (any ignorable type, the type of a rejected command)."""

from __future__ import annotations

import uuid

from producers.writer import metrics


def _types() -> set[str]:
    return {s.labels["type"] for m in metrics.APPENDS.collect() for s in m.samples}


def test_types_outside_the_vocabulary_beyond_a_bound_count_as_other() -> None:
    run = uuid.uuid4().hex[:8]
    for i in range(metrics.MAX_OTHER_TYPES * 3):
        metrics.appends(f"probe-{run}/t{i}", "rejected").inc()
    named = {t for t in _types() if t.startswith(f"probe-{run}/")}
    assert len(named) <= metrics.MAX_OTHER_TYPES
    assert "other" in _types()
    # The vocabulary keeps its names whatever clients sent before.
    metrics.appends("user/message", "committed").inc()
    assert "user/message" in _types()
