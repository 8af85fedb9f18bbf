"""Redis fails over under load: the primary is SIGKILLed, the Sentinel promotes the replica, and
the projectors (``DSH_REDIS_SENTINELS``) follow it; whatever the replica had not received yet is
rebuilt from the topic, and ``verify`` passes for every session."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.local.redis_sentinel import MASTER_NAME, LocalRedisSentinel
from servicekit.redis_clients import sentinel_primary
from servicekit.settings import RedisSettings
from tests.reliability.harness import (
    History,
    Load,
    Namespace,
    Pipeline,
    check_history,
    record_figures,
    run_load,
    sessions_spread,
    verify_all,
)
from tests.support.waiting import wait_for


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[LocalRedisSentinel]:
    from deploy.local.processes import free_ports

    local = LocalRedisSentinel(tmp_path / "redis", *free_ports(3))
    try:
        local.start()
        yield local
    finally:
        local.stop()


def test_the_projectors_follow_a_replica_the_sentinel_promotes(
    ns: Namespace, load: Load, sentinel: LocalRedisSentinel
) -> None:
    primary, replica = sentinel.servers
    ns.redis_url = primary.url
    ns.redis_env = {
        "DSH_REDIS_SENTINELS": sentinel.sentinels,
        "DSH_REDIS_SENTINEL_MASTER": MASTER_NAME,
    }
    with Pipeline(ns) as pipeline:

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            killed = time.monotonic()
            primary.process.kill()
            promoted = wait_for(
                lambda: sentinel.primary_port() == replica.port, 60, "the replica promoted"
            )
            return {"promoted_s": promoted, "failover_s": time.monotonic() - killed}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        verdict = check_history(ns.kafka, history)
        verdict.assert_clean()
        store = sentinel_primary(
            RedisSettings(sentinels=sentinel.sentinels, sentinel_master=MASTER_NAME)
        )
        try:
            extra["projector_catch_up_s"] = verify_all(ns, store, history.sessions, 120)
        finally:
            store.close()
        extra["service_restarts"] = pipeline.restarts()
        logs = "".join(p.log() for p in pipeline.projectors.values())
        extra["session_rebuilds"] = logs.count("rebuilding session")
        record_figures("Redis failover (Sentinel)", load, verdict, **extra)
