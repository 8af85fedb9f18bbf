"""`dsh replay` rebuilds read models from the topic alone: every session, or the named ones."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import redis
from pydantic import SecretStr

from cli.wiring import build_runtime
from interpreters import offload_images
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.records import Poison, Record
from projectors.replay import replay
from projectors.settings import ProjectorSettings
from projectors.topic_reader import read_session, scan_partitions
from projectors.verify import verify
from servicekit.settings import KafkaSettings, RedisSettings
from tests.conftest import TEST_PARTITIONS
from tests.integration.projector_support import (
    OFFLOAD,
    events_of,
    forked,
    interleave,
    projector_env,
    publish,
    scripted_session,
    simple_session,
)
from tests.support.read_models import KEYS, applied

INTERPRETERS = {"image/offload": offload_images}


def _dsh(
    topics: KafkaSettings, redis_url: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        env=projector_env(topics, redis_url, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


# In the calling process, and in forked workers that share the partitions unevenly.
@pytest.mark.parametrize("workers", ["1", "3"])
def test_replay_all_then_one_session(
    topics: KafkaSettings, redis_client: redis.Redis, servers, workers: str
) -> None:
    parent = scripted_session("replay-main").session
    sessions = [parent, forked(parent, "replay-fork")]
    sessions += [simple_session(f"replay-{i}", turns=4) for i in range(10)]
    records = publish(topics, interleave(*sessions))

    done = _dsh(topics, servers.redis_url, "replay", "--json", DSH_PROJECTOR_REPLAY_WORKERS=workers)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["sessions"] == len(sessions)
    assert result["records"] == records
    assert result["applied"] == 3 * records

    reader = Reader(redis_client, Keys())
    for session in sessions:
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)
        # In the recent index, at the time of its last event.
        last_time = session.events()[-1].time
        assert redis_client.zscore(KEYS.recent("transcript"), session.id) == last_time

    # Lose one session's surface; replaying just that session and projection restores it.
    redis_client.delete(KEYS.meta("surface", parent.id))
    assert applied(redis_client, "surface", parent.id) == -1
    done = _dsh(topics, servers.redis_url, "replay", parent.id, "--projection", "surface")
    assert done.returncode == 0, done.stderr
    assert "replayed" in done.stdout
    report = verify(parent.id, read_session(topics, parent.id), reader, INTERPRETERS)
    assert report.ok, "\n".join(report.differences)
    assert int(redis_client.hget(KEYS.meta("surface", parent.id), "applies") or 0) == len(parent)

    # A wrong id is an error, and its read models are not made, empty, by the replay.
    typo = _dsh(topics, servers.redis_url, "replay", "replay-mian", "--projection", "surface")
    assert typo.returncode == 1
    assert "SESSION_UNKNOWN" in typo.stderr and "replay-mian" in typo.stderr
    assert applied(redis_client, "surface", "replay-mian") == -1
    assert not redis_client.keys("*replay-mian*")


@pytest.mark.parametrize("named", [True, False], ids=["one-session", "whole-topic"])
def test_a_replay_applies_what_a_running_projector_applied_past_its_scan(
    topics: KafkaSettings,
    redis_client: redis.Redis,
    servers,
    monkeypatch: pytest.MonkeyPatch,
    named: bool,
) -> None:
    """Between the replay's scan of a partition and its rewrite of the partition's sessions,
    the rest of a session is appended and a running projector applies it; the rewrite sets
    the session back to where the scan ended, and the replay must then apply the rest again
    on top of it (else the session stays behind until its next event)."""
    session = simple_session("replay-race", turns=6)
    events = events_of(session)
    half = len(events) // 2
    publish(topics, events[:half])
    names = ("surface", "transcript", "audit")
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    settings = ProjectorSettings(projections=f"image/offload={OFFLOAD}", replay_workers=1)
    running = [build_runtime(name, topics, redis_settings, settings) for name in names]
    replaying = [build_runtime(name, topics, redis_settings, settings) for name in names]
    rewrite = replaying[0].rebuild_logs
    raced: list[bool] = []

    def after_the_scan(logs: Mapping[str, Sequence[Record | Poison]], cause: str) -> Any:
        if session.id in logs and not raced:
            assert len(logs[session.id]) == half  # what the scan saw
            publish(topics, events[half:])
            whole = {session.id: read_session(topics, session.id)}
            for runtime in running:
                runtime.rebuild_logs(whole, "test")
            assert applied(redis_client, "audit", session.id) == len(session) - 1
            raced.append(True)
        return rewrite(logs, cause)

    monkeypatch.setattr(replaying[0], "rebuild_logs", after_the_scan)
    replay(topics, replaying, [session.id] if named else [])

    assert raced
    for name in names:
        assert applied(redis_client, name, session.id) == len(session) - 1, name
        meta = KEYS.meta(name, session.id)
        assert int(redis_client.hget(meta, "applies") or 0) == len(session), name  # once each
    reader = Reader(redis_client, Keys())
    report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
    assert report.ok, "\n".join(report.differences)


def test_a_whole_topic_scan_for_a_replay_reads_one_partition_after_another(
    topics: KafkaSettings,
) -> None:
    """A replay keeps each partition's logs until that partition's end: read interleaved, it
    would hold the whole topic's at once. One partition's records all come, and its end is
    reported, before the next partition's first record."""
    sessions = [simple_session(f"scan-{i}", turns=2) for i in range(12)]
    publish(topics, interleave(*sessions))
    seen: list[tuple[str, int]] = []
    items = scan_partitions(
        topics,
        topics.topic("events"),
        range(TEST_PARTITIONS),
        on_end=lambda p, _end: seen.append(("end", p)),
        one_at_a_time=True,
    )
    for item in items:
        seen.append(("record", item.partition))
    order = [p for kind, p in seen if kind == "record"]
    assert len(order) == sum(len(s) for s in sessions) and len(set(order)) > 1
    for i, (kind, q) in enumerate(seen):
        if kind == "record":
            read_before = {p for k, p in seen[:i] if k == "record" and p != q}
            ended = {p for k, p in seen[:i] if k == "end"}
            assert read_before <= ended, seen


def test_a_whole_topic_replay_keeps_the_cache_to_its_size(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    """Each rebuilt session's state is cached (the catch-up plans against it); a replay of the
    whole topic kept them all, so its memory grew with the topic. It keeps at most
    DSH_PROJECTOR_CACHE_SESSIONS once a partition is done."""
    sessions = [simple_session(f"replay-cached-{i}", turns=1) for i in range(16)]
    publish(topics, interleave(*sessions))
    settings = ProjectorSettings(projections="", cache_sessions=2, replay_workers=1)
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    runtimes = [build_runtime(n, topics, redis_settings, settings) for n in ("surface", "audit")]
    result = replay(topics, runtimes)
    assert result.sessions == len(sessions)
    for rt in runtimes:
        assert len(rt.store.cache) <= 2, (rt.name, len(rt.store.cache))
    reader = Reader(redis_client, Keys())
    for session in sessions:
        assert applied(redis_client, "surface", session.id) == len(session) - 1
        assert reader.audit(session.id).applied == len(session) - 1
