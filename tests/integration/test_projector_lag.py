"""Kafka's own lag reading of the projector groups: the committed offset against the end of the
partition, as ``kafka-consumer-groups`` computes it. Every record on the events topic is
written in a transaction, whose commit marker takes the offset after the last record; caught
up and idle, a projector commits past it, so the lag reads 0, not 1 for good."""

from __future__ import annotations

import uuid

from projectors.views import Views
from servicekit.settings import KafkaSettings
from tests.conftest import TEST_PARTITIONS, Servers
from tests.integration.projector_support import (
    events_of,
    group_lag,
    projectors_running,
    publish,
    simple_session,
)
from tests.support.processes import run_dsh
from tests.support.waiting import wait_for

PROJECTIONS = ("surface", "transcript", "audit")


def test_caught_up_projectors_read_lag_0_in_kafkas_own_terms(
    topics: KafkaSettings, servers: Servers, redis_client: object
) -> None:
    sessions = [simple_session(f"lag-{uuid.uuid4().hex[:6]}-{i}", turns=2) for i in range(6)]
    publish(topics, events_of(*sessions), per_transaction=7)  # many markers, one per 7 records
    views = Views(redis_client, timeout_s=60)  # type: ignore[arg-type]
    group_prefix = f"g-{topics.topic_prefix}"
    with projectors_running(topics, servers.redis_url):
        for s in sessions:
            for read in (views.surface, views.transcript, views.audit):
                read(s.id, at_least=len(s) - 1)
        for projection in PROJECTIONS:
            group = f"{group_prefix}-{projection}"

            def at_zero(group: str = group) -> bool:
                return set(group_lag(topics, group, TEST_PARTITIONS).values()) == {0}

            wait_for(at_zero, 30, f"the {projection} group's lag to read 0")
        lags = {p: group_lag(topics, f"{group_prefix}-{p}", TEST_PARTITIONS) for p in PROJECTIONS}
        # And as Kafka's own tool says it (`kafka-consumer-groups.sh --describe`).
        described = {p: _described_lag(topics, f"{group_prefix}-{p}") for p in PROJECTIONS}
    assert all(lag and set(lag.values()) == {0} for lag in lags.values()), lags
    assert described == {p: {0} for p in PROJECTIONS}, described


def _described_lag(kafka: KafkaSettings, group: str) -> set[int]:
    """The LAG column of ``dsh kafka consumer-groups --describe`` for the events topic."""
    done = run_dsh(
        None,
        "kafka", "consumer-groups", "--bootstrap-server", kafka.bootstrap_servers,
        "--describe", "--group", group,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    header = next(r for r in rows if r[:1] == ["GROUP"])
    column = header.index("LAG")
    # An empty partition has no committed offset: "-" there.
    events = [r for r in rows if len(r) > column and r[1] == kafka.topic("events")]
    return {int(r[column]) for r in events if r[column] != "-"}
