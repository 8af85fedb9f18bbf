"""What the export's consumer prefetched, by librdkafka's own count: its statistics'
``fetchq_size`` (the bytes of records in the one queue all partitions share), with the export
held on a batch's first record so that the consumer fetches all it is allowed to.

With a group's consumer each partition's ``fetchq_size`` reports that whole shared queue, not
its own part (librdkafka#5140, open): the largest is the queue's size. Should librdkafka come to
report each partition's part, the queue is their sum, and the tests' lower bounds say so."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from projectors.export import run as export_run
from schemas import decode_event
from servicekit import kafka_clients


@dataclass
class PrefetchWatch:
    """Installed on the export (:meth:`install`): ``queued`` gathers each report's queue sizes,
    ``made`` the configuration of each consumer made. The first record of a batch is held 2 s
    until a report shows the queue at ``limit``: the reports come with the consumer's next
    batch, not during a hold, so one hold when the broker answers at once, another for each
    batch one came too late for (10 at most)."""

    limit: int
    queued: list[int] = field(default_factory=list)
    made: list[dict[str, Any]] = field(default_factory=list)
    _held: list[int] = field(default_factory=list)  # len(queued) at each hold

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(kafka_clients, "Consumer", self._consumer)
        monkeypatch.setattr(export_run, "decode_event", self._held_until_queued)

    def _consumer(self, config: dict[str, Any]) -> Any:
        from confluent_kafka import Consumer

        self.made.append(config)
        # Reported every 100 ms, each report taken then and handed over at the next poll.
        return Consumer({**config, "statistics.interval.ms": 100, "stats_cb": self._stats})

    def _stats(self, report: str) -> None:
        for topic in json.loads(report)["topics"].values():
            self.queued.extend(p["fetchq_size"] for p in topic["partitions"].values())

    def _held_until_queued(self, value: bytes, **kw: Any) -> Any:
        held = self._held
        if (
            max(self.queued, default=0) < self.limit
            and (not held or held[-1] != len(self.queued))
            and len(held) < 10
        ):
            held.append(len(self.queued))
            time.sleep(2)
        return decode_event(value, **kw)
