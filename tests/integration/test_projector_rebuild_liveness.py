"""A gap's rebuild scans the session's partition from its first offset: on a large partition
that outlasts the liveness bound while it makes progress, and a probe that failed then would
restart the projector into the same scan."""

from __future__ import annotations

import itertools
import threading
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

STALL_S = 0.15
FILLER = 60_000  # other records of the partition: the scan outlasts STALL_S several times


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

    health = Health(stall_s=STALL_S)
    runtime = build_runtime(
        "surface",
        topics,
        RedisSettings(url=SecretStr(servers.redis_url)),
        ProjectorSettings(group_prefix=f"g-{topics.topic_prefix}", projections=""),
        health,
    )
    probes: list[int] = []
    done = threading.Event()

    def probe() -> None:  # what Kubernetes' liveness probe asks, every 20 ms
        while not done.is_set():
            probes.append(health.liveness()[0])
            time.sleep(0.02)

    prober = threading.Thread(target=probe, daemon=True)
    health.beat()
    started = time.monotonic()
    prober.start()
    try:
        runtime.rebuilds.rebuild({partition: {session.id}}, cause="gap")
    finally:
        done.set()
        prober.join(5)
    took = time.monotonic() - started
    assert took > 2 * STALL_S, f"the scan took {took:.2f}s: too short to tell anything"
    assert probes and set(probes) == {200}, f"liveness failed during a {took:.1f}s rebuild"
    view = Views(redis_client, timeout_s=0).surface(session.id)
    assert view.applied == len(session) - 1 and view.messages == session.derive_messages()
