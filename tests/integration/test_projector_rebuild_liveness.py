"""A gap's rebuild scans the session's partition from its first offset: on a large partition
that outlasts the liveness bound while it makes progress, and a probe that failed then would
restart the projector into the same scan. So the scan beats the service's liveness as it goes:
counted here, not timed, as a busy machine's pauses would make any stall bound flaky."""

from __future__ import annotations

import itertools
import time

import redis
from pydantic import SecretStr

from cli.wiring import build_runtime
from projectors.settings import ProjectorSettings
from projectors.views import Views
from servicekit.health import Health
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings, RedisSettings
from tests.conftest import TEST_PARTITIONS, Servers
from tests.integration.projector_support import events_of, publish, simple_session

FILLER = 20_000  # other records of the partition, which the scan reads past


def test_a_rebuild_scanning_a_large_partition_keeps_the_projector_alive(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    session = simple_session("rebuilt-alive", turns=2)
    partition = partition_for(session.id, TEST_PARTITIONS)
    keys = (f"fill-{i}" for i in itertools.count())
    same = itertools.islice((k for k in keys if partition_for(k, TEST_PARTITIONS) == partition), 64)
    fillers = list(same)
    publish(topics, ((fillers[i % 64], b"not an event") for i in range(FILLER)), 5_000)
    publish(topics, events_of(session))

    health = Health()
    beats: list[float] = []
    beat = health.beat

    def counted() -> None:
        beats.append(time.monotonic())
        beat()

    health.beat = counted  # type: ignore[method-assign]
    runtime = build_runtime(
        "surface",
        topics,
        RedisSettings(url=SecretStr(servers.redis_url)),
        ProjectorSettings(group_prefix=f"g-{topics.topic_prefix}", projections=""),
        health,
    )
    beats.clear()
    runtime.rebuilds.rebuild({partition: {session.id}}, cause="gap")
    # At least one beat per thousand records scanned (the partition holds the session too).
    assert len(beats) >= FILLER // 1_000, f"{len(beats)} beats while scanning {FILLER} records"
    view = Views(redis_client, timeout_s=0).surface(session.id)
    assert view.applied == len(session) - 1 and view.messages == session.derive_messages()
