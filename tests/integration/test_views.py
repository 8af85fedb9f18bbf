"""Read-your-writes reads (:class:`projectors.views.Views`) against real Kafka, Redis and the
three projectors: a read with ``at_least`` waits for its seq, bounded; every other answer is a
typed error, never an empty or silently stale view."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis
from pydantic import SecretStr

from cli.wiring import build_runtime
from producers import SessionClient
from projectors.errors import (
    ProjectionBehindError,
    SessionBlockedError,
    SessionRebuildingError,
    SessionUnknownError,
)
from projectors.keys import Keys
from projectors.settings import ProjectorSettings
from projectors.transcript import kind_of
from projectors.views import Views, follow
from servicekit.settings import ConfigError, KafkaSettings, RedisSettings
from tests.conftest import Servers
from tests.integration.projector_support import (
    events_of,
    projectors_running,
    publish,
    scripted_session,
    simple_session,
)
from tests.integration.writer_support import running_writer, writer_settings
from tests.support.builders import user
from tests.support.waiting import wait_for


@pytest.fixture
def views(redis_client: redis.Redis) -> Views:
    return Views(redis_client, Keys(), timeout_s=0)


def test_a_read_at_least_a_seq_waits_for_the_projection_and_is_bounded(
    topics: KafkaSettings, servers: Servers, views: Views
) -> None:
    session = simple_session("ryw", turns=3)
    last = len(session) - 1
    publish(topics, events_of(session))
    # No projector runs yet: the seq the append returned is not in Redis, and the read says so.
    started = time.monotonic()
    with pytest.raises(ProjectionBehindError, match=f"not yet {last}"):
        views.surface(session.id, at_least=last, timeout_s=0.3)
    assert time.monotonic() - started >= 0.3  # it waited its bound out
    with projectors_running(topics, servers.redis_url):
        surface = views.surface(session.id, at_least=last, timeout_s=30)
        transcript = views.transcript(session.id, at_least=last, timeout_s=30)
        audit = views.audit(session.id, at_least=last, timeout_s=30)
    assert surface.applied == last and surface.messages == session.derive_messages()
    assert transcript.applied == last and transcript.entries[-1].seq == last  # turn/end
    assert audit.applied == last and sorted(audit.events) == list(range(len(session)))


def test_an_unknown_session_is_an_error_not_an_empty_view(views: Views) -> None:
    for read in (views.surface, views.transcript, views.audit):
        with pytest.raises(SessionUnknownError, match="no events of session nobody"):
            read("nobody")
    # Asked for a seq, the caller says the session exists: the projection is behind.
    with pytest.raises(ProjectionBehindError):
        views.transcript("nobody", at_least=0, timeout_s=0.05)


def test_a_blocked_session_says_where_and_why_and_carries_the_view_to_the_block(
    topics: KafkaSettings, servers: Servers, views: Views
) -> None:
    needs = scripted_session("ryw-blocked").session  # needs the image/offload interpreter
    publish(topics, events_of(needs))
    with (
        projectors_running(topics, servers.redis_url, names=("surface",), projections=""),
        pytest.raises(SessionBlockedError) as raised,
    ):
        views.surface(needs.id, at_least=len(needs) - 1, timeout_s=30)
    assert raised.value.code == "SESSION_BLOCKED"
    assert "MISSING_INTERPRETER" in raised.value.message
    view = raised.value.view
    assert view is not None and view.blocked is not None
    assert -1 <= view.applied < len(needs) - 1  # up to the block, not past it


def test_following_a_blocked_session_yields_every_entry_before_the_block_then_ends(
    topics: KafkaSettings, servers: Servers, views: Views
) -> None:
    """`dsh tail` and the HTTP stream: the entries applied before the block (here in the batch
    that blocked the session) come first, then SessionBlockedError; from a seq on, the rest."""
    session = simple_session(f"follow-{uuid.uuid4().hex[:6]}", turns=2)
    publish(topics, [*events_of(session), (session.id, b"definitely not avro")])
    reader = views.reader
    with projectors_running(topics, servers.redis_url, names=("transcript",)):
        wait_for(lambda: reader.blocked("transcript", session.id) is not None, 30, "the block")
    want = [ev.seq for ev in session.events() if kind_of(ev) is not None]
    assert want and [e.seq for e in reader.transcript(session.id)] == want
    for after, expected in ((-1, want), (want[1], want[2:])):
        got: list[int] = []
        with pytest.raises(SessionBlockedError, match="transcript"):
            for entry in follow(reader, session.id, after=after, block_ms=50):
                assert entry is not None  # never waits: the entries, then the block
                got.append(entry.seq)
        assert got == expected


def test_a_read_during_a_rebuild_waits_for_it_and_says_so_when_it_outlasts_the_bound(
    topics: KafkaSettings, servers: Servers, views: Views
) -> None:
    session = simple_session("ryw-rebuild", turns=2)
    publish(topics, events_of(session))
    with projectors_running(topics, servers.redis_url):
        views.surface(session.id, at_least=len(session) - 1, timeout_s=30)
        views.transcript(session.id, at_least=len(session) - 1, timeout_s=30)  # read below
    runtime = build_runtime(
        "surface", topics, RedisSettings(url=SecretStr(servers.redis_url)), ProjectorSettings()
    )
    with runtime.rebuilds.marked([session.id], "test"):
        with pytest.raises(SessionRebuildingError, match=r"\(test, since") as raised:
            views.surface(session.id, timeout_s=0.2)
        assert raised.value.view.applied == len(session) - 1  # what it held, maybe stale
        other = views.transcript(session.id)  # only the surface is being rebuilt
        assert other.applied == len(session) - 1

    # A rebuild that ends within the bound is waited for: the read answers after it.
    marks = runtime.rebuilds.marked([session.id], "test")
    marks.__enter__()
    # Timed from before the timer starts: a pause of this thread between the two would
    # otherwise be taken off the wait the read really made.
    started = time.monotonic()
    ended = threading.Timer(0.3, marks.__exit__, (None, None, None))
    ended.start()
    try:
        assert views.surface(session.id, timeout_s=30).applied == len(session) - 1
        assert time.monotonic() - started >= 0.25
    finally:
        ended.join()


def test_two_services_read_their_own_and_each_others_writes_through_the_client(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """A runtime appends and reads its surface back at once; a UI service, given the seq the
    runtime got, reads the same; neither polls, neither sees a view behind its seq."""
    sid = f"ryw-{uuid.uuid4().hex[:8]}"
    hello = user("u1", "Hi")
    with (
        running_writer(topics, writer_settings()),
        projectors_running(topics, servers.redis_url),
        SessionClient(settings=topics, timeout=20, views=Views(redis_client)) as runtime,
        SessionClient(settings=topics, timeout=20, views=Views(redis_client)) as ui,
        SessionClient(settings=topics, timeout=20) as bare,
    ):
        with pytest.raises(SessionUnknownError):
            runtime.surface(sid)  # nothing appended by anyone yet
        runtime.append(sid, "turn/start", {"turn": 1})
        said = runtime.append(sid, "user/message", hello, surface_op="append")
        assert runtime.committed_seq(sid) == said.seq and ui.committed_seq(sid) is None
        # No wait written here: the read waits for the seq this client was given.
        assert [m["id"] for m in runtime.surface(sid).messages] == ["u1"]
        assert [e.seq for e in runtime.transcript(sid).entries] == [0, said.seq]
        assert ui.audit(sid, at_least=said.seq).applied == said.seq
        with pytest.raises(ConfigError, match="without views") as raised:
            bare.surface(sid)
        assert raised.value.code == "NO_READ_MODELS"
