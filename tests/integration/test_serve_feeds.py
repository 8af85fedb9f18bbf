"""The SSE stream's history and its session's feed against real Kafka, Redis and the
projectors: entries projected while a stream joins reach it once, whichever comes first."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
import redis

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
