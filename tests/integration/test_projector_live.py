"""Live behaviour: a UI tails the transcript with XREAD BLOCK while events arrive; two surface
projectors in one group share the partitions; the metrics count what happened."""

from __future__ import annotations

import json
import threading

import redis
from prometheus_client import REGISTRY

from deploy.config import KafkaSettings
from projectors.keys import Keys
from projectors.read_api import Reader, TranscriptEntry
from projectors.topic_reader import read_session
from projectors.verify import verify
from tests.integration.projector_support import (
    applied,
    events_of,
    interleave,
    projectors_running,
    publish,
    simple_session,
    wait_until,
)


def test_a_ui_tails_the_transcript_live(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    session = simple_session("live", turns=5)
    events = events_of(session)
    seen: list[TranscriptEntry] = []
    tail_client = redis.Redis.from_url(servers.redis_url)

    def tail() -> None:
        for entry in Reader(tail_client, Keys()).tail(session.id, block_ms=200):
            seen.append(entry)
            if entry.seq == len(session) - 1:
                return

    tailer = threading.Thread(target=tail, daemon=True)
    tailer.start()
    with projectors_running(topics, servers.redis_url, names=("transcript",)):
        publish(topics, events[:10])
        wait_until(lambda: applied(redis_client, "transcript", session.id) == 9, what="part 1")
        publish(topics, events[10:])
        tailer.join(20)
    tail_client.close()
    assert not tailer.is_alive()
    # Every turn boundary and every appended message, in log order, nothing twice.
    assert [e.seq for e in seen] == [
        ev.seq for ev in session.events() if ev.type not in ("step/start", "step/end")
    ]


def test_two_surface_projectors_share_a_group_and_count_their_work(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    sessions = [simple_session(f"shared-{i}", turns=3) for i in range(12)]
    before = REGISTRY.get_sample_value(
        "dsh_projector_events_total", {"projector": "surface", "result": "applied"}
    )
    with (
        projectors_running(topics, servers.redis_url, names=("surface",)) as first,
        projectors_running(topics, servers.redis_url, names=("surface",)) as second,
    ):
        publish(topics, [e for s in sessions for e in events_of(s)])
        wait_until(
            lambda: all(applied(redis_client, "surface", s.id) == len(s) - 1 for s in sessions),
            what="all sessions on the surface",
        )
        work = [rt.stats["applied"] for rt in (*first.values(), *second.values())]
    assert sum(work) == sum(len(s) for s in sessions)  # each event applied by exactly one
    after = REGISTRY.get_sample_value(
        "dsh_projector_events_total", {"projector": "surface", "result": "applied"}
    )
    assert (after or 0) - (before or 0) == sum(work)
    reader = Reader(redis_client, Keys())
    report = verify(sessions[0].id, read_session(topics, sessions[0].id), reader, {})
    assert not [d for d in report.differences if d.startswith("surface")], report.differences


def test_a_tiny_session_cache_reloads_state_from_redis_and_stays_exact(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    sessions = [simple_session(f"evict-{i}", turns=3) for i in range(10)]
    publish(topics, interleave(*sessions))
    with projectors_running(
        topics, servers.redis_url, names=("surface",), cache_sessions=2, batch_size=7
    ):
        wait_until(
            lambda: all(applied(redis_client, "surface", s.id) == len(s) - 1 for s in sessions),
            what="all sessions on the surface",
        )
    reader = Reader(redis_client, Keys())
    for s in sessions:
        assert reader.surface(s.id).messages == json.loads(json.dumps(s.derive_messages()))
        assert redis_client.hget(f"dsh:{{{s.id}}}:surface:meta", "applies") == str(len(s)).encode()
