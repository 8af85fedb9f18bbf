"""Live behaviour: a UI tails the transcript with XREAD BLOCK while events arrive; two surface
projectors in one group share the partitions; the metrics count what happened; a projector
plans its next batch while Redis applies the last, and commits only what Redis applied."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import redis
from confluent_kafka import Message
from prometheus_client import REGISTRY
from pydantic import SecretStr

from cli.wiring import build_runtime
from projectors.keys import Keys
from projectors.link import Pending, RedisLink
from projectors.read_api import Reader, TranscriptEntry
from projectors.settings import ProjectorSettings
from projectors.topic_reader import read_session
from projectors.verify import verify
from servicekit.settings import KafkaSettings, RedisSettings
from tests.conftest import TEST_PARTITIONS
from tests.integration.projector_support import (
    events_of,
    interleave,
    projectors_running,
    publish,
    simple_session,
)
from tests.support.read_models import KEYS, applied
from tests.support.waiting import wait_for


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
        wait_for(lambda: applied(redis_client, "transcript", session.id) == 9, what="part 1")
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
        wait_for(
            lambda: all(applied(redis_client, "surface", s.id) == len(s) - 1 for s in sessions),
            what="all sessions on the surface",
        )
    # Counted once the replies are read, a moment after Redis shows them: read once stopped.
    work = [rt.stats["applied"] for rt in (*first.values(), *second.values())]
    assert sum(work) == sum(len(s) for s in sessions)  # each event applied by exactly one
    after = REGISTRY.get_sample_value(
        "dsh_projector_events_total", {"projector": "surface", "result": "applied"}
    )
    assert (after or 0) - (before or 0) == sum(work)
    reader = Reader(redis_client, Keys())
    report = verify(sessions[0].id, read_session(topics, sessions[0].id), reader, {})
    assert not [d for d in report.differences if d.startswith("surface")], report.differences


def test_a_second_group_over_the_same_keys_applies_nothing_twice_and_counts_each_duplicate(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    """A projector that lost its group's offsets (a new group prefix, a redeploy) reads the
    topic from the start over keys that already hold it: every event is a duplicate, skipped
    and counted, and nothing is applied again."""
    sessions = [simple_session(f"dup-{i}", turns=3) for i in range(6)]
    publish(topics, interleave(*sessions))
    total = sum(len(s) for s in sessions)

    def counted(result: str) -> float:
        labels = {"projector": "transcript", "result": result}
        return REGISTRY.get_sample_value("dsh_projector_events_total", labels) or 0.0

    with projectors_running(topics, servers.redis_url, names=("transcript",)):
        wait_for(
            lambda: all(applied(redis_client, "transcript", s.id) == len(s) - 1 for s in sessions),
            what="all sessions in the transcript",
        )
    before = {result: counted(result) for result in ("applied", "duplicate")}
    group = f"g2-{topics.topic_prefix}"
    with projectors_running(
        topics, servers.redis_url, names=("transcript",), group_prefix=group
    ) as again:
        runtime = again["transcript"]
        wait_for(lambda: runtime.stats["duplicate"] == total, what="every event seen again")
    assert runtime.stats["applied"] == 0
    assert counted("duplicate") - before["duplicate"] == total
    assert counted("applied") == before["applied"]
    for s in sessions:
        meta = redis_client.hgetall(KEYS.meta("transcript", s.id))
        assert int(meta[b"applies"]) == len(s)  # each event applied once, by the first group


def test_an_instance_joining_takes_only_its_share_while_the_other_keeps_its_own(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    """Cooperative rebalancing: the first instance gives up only the partitions the second
    takes (the eager protocol would revoke all of them and hand most back), under load, and
    every event is still applied exactly once."""
    sessions = [simple_session(f"join-{i}", turns=4) for i in range(24)]
    events = interleave(*sessions)
    chunks = [events[i : i + 40] for i in range(0, len(events), 40)]
    with projectors_running(topics, servers.redis_url, names=("surface",)) as first:
        a = first["surface"]
        publish(topics, chunks[0])
        wait_for(lambda: len(a.partitions) == TEST_PARTITIONS, what="the first owning all")
        stop = threading.Event()

        def load() -> None:
            for chunk in chunks[1:]:
                publish(topics, chunk)
                if stop.wait(0.02):
                    return

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        with projectors_running(topics, servers.redis_url, names=("surface",)) as second:
            b = second["surface"]
            wait_for(
                lambda: bool(b.partitions) and len(a.partitions | b.partitions) == TEST_PARTITIONS,
                what="the two splitting the partitions",
            )
            assert not a.partitions & b.partitions
            assert a.stats["partitions_revoked"] == b.stats["partitions_assigned"]
            assert a.stats["partitions_assigned"] == TEST_PARTITIONS  # never handed back
            loader.join(60)
            assert not loader.is_alive()
            wait_for(
                lambda: all(applied(redis_client, "surface", s.id) == len(s) - 1 for s in sessions),
                what="all sessions on the surface",
            )
    # Counted once the replies are read, a moment after Redis shows them: read once stopped.
    assert a.stats["applied"] + b.stats["applied"] == len(events)
    assert b.stats["applied"] > 0
    reader = Reader(redis_client, Keys())
    for s in sessions[:4]:
        assert reader.surface(s.id).messages == json.loads(json.dumps(s.derive_messages()))


def test_an_instance_giving_up_partitions_keeps_the_cached_sessions_of_the_others(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    sessions = [simple_session(f"keep-{i}", turns=2) for i in range(16)]
    publish(topics, interleave(*sessions))
    with projectors_running(topics, servers.redis_url, names=("surface",)) as first:
        a = first["surface"]
        wait_for(
            lambda: all(applied(redis_client, "surface", s.id) == len(s) - 1 for s in sessions),
            what="all sessions on the surface",
        )
        before = dict(a.cache)
        assert len(before) == len(sessions)
        with projectors_running(topics, servers.redis_url, names=("surface",)) as second:
            b = second["surface"]
            wait_for(lambda: bool(b.partitions), what="the second taking its share")
            kept = {sid: e for sid, e in before.items() if e.partition in a.partitions}
            gone = before.keys() - kept.keys()
            assert kept and gone
            assert all(a.cache.get(sid) is entry for sid, entry in kept.items())
            assert not gone & a.cache.keys()


def test_a_tiny_session_cache_reloads_state_from_redis_and_stays_exact(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    sessions = [simple_session(f"evict-{i}", turns=3) for i in range(10)]
    publish(topics, interleave(*sessions))
    with projectors_running(
        topics, servers.redis_url, names=("surface",), cache_sessions=2, batch_size=7
    ):
        wait_for(
            lambda: all(applied(redis_client, "surface", s.id) == len(s) - 1 for s in sessions),
            what="all sessions on the surface",
        )
    reader = Reader(redis_client, Keys())
    for s in sessions:
        assert reader.surface(s.id).messages == json.loads(json.dumps(s.derive_messages()))
        assert redis_client.hget(KEYS.meta("surface", s.id), "applies") == str(len(s)).encode()


def test_the_next_batch_is_submitted_while_redis_applies_the_last_and_commits_wait_for_redis(
    topics: KafkaSettings, redis_client: redis.Redis, servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = [simple_session(f"overlap-{i}", turns=4) for i in range(20)]
    publish(topics, interleave(*sessions))
    settings = ProjectorSettings(
        group_prefix=f"g-{topics.topic_prefix}", batch_size=10, poll_timeout_s=0.05
    )
    runtime = build_runtime(
        "transcript", topics, RedisSettings(url=SecretStr(servers.redis_url)), settings
    )
    in_flight: list[int] = []  # batches submitted and not read, after each submission
    link = runtime.link
    assert isinstance(link, RedisLink)  # one Redis: the link that overlaps batches
    submit = link.submit

    def counting_submit(commands: Any) -> Pending:
        pending = submit(commands)
        in_flight.append(sum(not p.done for p in link._outstanding))
        return pending

    replies_of: dict[tuple[int, int], Any] = {}  # (partition, offset) → its batch's replies
    submit_batch = runtime.loop.submit

    def recording_submit(messages: list[Message], serial: int | None = None) -> Any:
        batch = submit_batch(messages, serial)
        replies_of.update(((m.partition() or 0, m.offset() or 0), batch.pending) for m in messages)
        return batch

    unacknowledged: list[tuple[str, int, int]] = []  # committed before Redis answered
    commit = runtime.loop.commit

    def checking_commit(consumer: Any, messages: list[Message], *how: Any, **more: Any) -> None:
        for m in messages:
            if not replies_of[(m.partition() or 0, m.offset() or 0)].done:
                unacknowledged.append(
                    ((m.key() or b"").decode(), m.partition() or 0, m.offset() or 0)
                )
        commit(consumer, messages, *how, **more)

    monkeypatch.setattr(runtime.link, "submit", counting_submit)
    monkeypatch.setattr(runtime.loop, "submit", recording_submit)
    monkeypatch.setattr(runtime.loop, "commit", checking_commit)
    stop = threading.Event()
    thread = threading.Thread(target=runtime.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: all(applied(redis_client, "transcript", s.id) == len(s) - 1 for s in sessions),
            what="all sessions in the transcript",
        )
    finally:
        stop.set()
        thread.join(30)
    assert max(in_flight) >= 2, in_flight  # batch N+1 was sent before N's replies were read
    assert not unacknowledged
    assert runtime.stats["applied"] == sum(len(s) for s in sessions)
    for s in sessions:
        meta = redis_client.hgetall(KEYS.meta("transcript", s.id))
        assert int(meta[b"applies"]) == len(s)  # nothing applied twice
