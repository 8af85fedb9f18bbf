"""The SSE stream's history and its session's feed against real Kafka, Redis and the
projectors: entries projected while a stream joins reach it once, whichever comes first."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from functools import partial
from typing import Any

import pytest
import redis
from pydantic import SecretStr

from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.views import Views
from serve import feeds as feeds_module
from serve.feeds import Feeds
from serve.stream import events
from servicekit.settings import KafkaSettings
from tests.conftest import Servers
from tests.integration.projector_support import (
    events_of,
    projectors_running,
    publish,
    simple_session,
)


def test_entries_projected_before_the_feed_starts_still_reach_the_stream(
    topics: KafkaSettings,
    servers: Servers,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = simple_session(f"feed-{uuid.uuid4().hex[:8]}", turns=4)
    wire = events_of(session)
    first, rest = wire[:12], wire[12:]  # two turns, then two more
    views = Views(redis_client, Keys(), timeout_s=30)
    # The feed is slow to read where it starts: more entries land meanwhile.
    positioning = threading.Event()
    go_on = threading.Event()
    last_seq = feeds_module._Feed._last_seq

    def slow_last_seq(self: Any, reader: Reader) -> int:
        positioning.set()
        go_on.wait(30)
        return last_seq(self, reader)

    monkeypatch.setattr(feeds_module._Feed, "_last_seq", slow_last_seq)
    seqs: list[int] = []
    last = len(session) - 1

    async def stream() -> None:
        frames = events(Feeds(Reader(redis_client, Keys())), session.id, -1, threading.Event())
        async for frame in frames:
            if frame.startswith("id: "):
                seqs.append(int(frame.split("\n", 1)[0][4:]))
                if seqs[-1] == last:
                    await frames.aclose()
                    return

    with projectors_running(topics, servers.redis_url, ["transcript"]):
        publish(topics, first)
        views.transcript(session.id, at_least=11)
        listener = threading.Thread(target=lambda: asyncio.run(stream()), daemon=True)
        listener.start()
        assert positioning.wait(10)
        publish(topics, rest)
        expected = [e.seq for e in views.transcript(session.id, at_least=last).entries]
        go_on.set()
        listener.join(30)
    assert seqs == expected


def test_a_feed_never_outlives_the_stream_slots_so_fast_reconnects_cannot_drain_redis(
    servers: Servers,
) -> None:
    """A feed ends at its idle second after its last stream left, holding a Redis connection
    in its blocking read until then. Its stream's slot used to come back at once, so streams
    reopened quickly to other sessions ran more feeds than DSH_SERVE_MAX_STREAMS, past what the
    Redis pool is sized for. The slot now comes back once the feed has ended."""
    import httpx

    from serve.app import create_app
    from serve.settings import ServeSettings
    from servicekit.settings import RedisSettings
    from tests.integration.serve_support import serving
    from tests.support.waiting import wait_for

    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    app = create_app(ServeSettings(max_streams=1), KafkaSettings(), redis_settings, Keys())
    most, done = 0, threading.Event()

    def feeds(prefix: str = "feed-fast-") -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(prefix)]

    def started(session: str) -> bool:
        return bool(feeds(f"feed-{session}"))

    def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, len(feeds()))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        for n in range(5):
            session = f"fast-{n}-{uuid.uuid4().hex[:8]}"
            deadline = time.monotonic() + 10
            while True:  # 503 TOO_MANY_STREAMS until the last one's feed has ended
                with http.stream("GET", f"/v1/sessions/{session}/transcript/stream") as r:
                    if r.status_code == 200:
                        wait_for(partial(started, session), 10, "its feed")
                        break
                    assert r.status_code == 503, r.read()
                assert time.monotonic() < deadline, "the slot never came back"
                time.sleep(0.05)
    done.set()
    watcher.join(5)
    assert most == 1, f"{most} feeds ran at once with one stream slot"
