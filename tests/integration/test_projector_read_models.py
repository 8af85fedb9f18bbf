"""The three read models, built by the projectors from real Kafka into real Redis, agree with
the core: surface = derive_messages(), transcript keeps compacted turns, audit knows what a
summary replaced; `dsh verify` passes."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import redis

import dsh
from interpreters import offload_images
from projectors.inspection import Inspection
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.topic_reader import read_session
from projectors.verify import verify
from servicekit.settings import KafkaSettings
from tests.integration.projector_support import (
    events_of,
    forked,
    interleave,
    projector_env,
    projectors_running,
    publish,
    scripted_session,
)
from tests.support.builders import user
from tests.support.read_models import KEYS, applied
from tests.support.waiting import wait_for

INTERPRETERS = {"image/offload": offload_images}


def _all_applied(client: redis.Redis, sessions: dict[str, int]) -> bool:
    return all(
        applied(client, projection, sid) == last
        for sid, last in sessions.items()
        for projection in ("surface", "transcript", "audit")
    )


def test_scripted_session_read_models_match_the_core(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    script = scripted_session("sess-main")
    parent = script.session
    child = forked(parent, "sess-fork")
    publish(topics, interleave(parent, child))
    last = {parent.id: len(parent) - 1, child.id: len(child) - 1}

    with projectors_running(topics, servers.redis_url):
        wait_for(lambda: _all_applied(redis_client, last), what="all three projections")

    reader = Reader(redis_client, Keys())
    for session in (parent, child):
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)
        assert json.loads(json.dumps(reader.surface(session.id).messages)) == json.loads(
            json.dumps(session.derive_messages())
        )

    # The image was offloaded through the registered interpreter, on the surface only.
    surface = reader.surface(parent.id)
    image_message = surface.node_messages[script.image_seq]["message"]
    assert [b["type"] for b in image_message["content"]] == ["text", "text"]
    assert surface.content_generation == parent.surface.content_generation

    # The transcript never loses a compacted turn, and keeps the original tool result.
    transcript = reader.transcript(parent.id)
    seqs = [e.seq for e in transcript]
    compacted = {s for s in script.summarized if s != script.rewrite_seq}
    assert compacted | {script.failed_result_seq} <= set(seqs)
    assert script.summary_seq not in seqs  # a replacement is not a transcript entry
    assert script.rewrite_seq not in seqs
    assert [e.type for e in transcript if e.kind == "progress"][:3] == [
        "turn/start",
        "assistant/attempt",
        "tool/call",
    ]

    # The audit answers "what did this summary replace" (and the reverse).
    audit = reader.audit(parent.id)
    replaced = audit.replaced(script.summary_seq)
    assert [r["seq"] for r in replaced] == list(script.summarized)
    assert [r["type"] for r in replaced] == ["user/message", "assistant/message", "tool/result"]
    assert all(audit.shadowed_by[s] == script.summary_seq for s in script.summarized)
    assert script.summary_seq in audit.cited_by[script.summarized[0]]
    assert audit.index["projections"] == [script.offload_seq]
    assert len(audit.index["requests"]) == 2
    assert audit.index["errors"]  # the failed tool call
    child_audit = reader.audit(child.id)
    assert child_audit.index["lineage"] == [len(parent)]  # the fork's end-seed marker
    assert child_audit.events[len(parent)]["data"] == {"inherited": True}

    # The CLI says the same, and exits 0.
    env = projector_env(topics, servers.redis_url)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "verify", parent.id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "cli", "show", "audit", parent.id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"replaced by {script.summary_seq}" in shown.stdout


def _projected_script(
    topics: KafkaSettings, redis_client: redis.Redis, redis_url: str, session_id: str
) -> dsh.Session:
    """A scripted session published and projected by all three projectors, then stopped."""
    session = scripted_session(session_id).session
    publish(topics, events_of(session))
    last = {session.id: len(session) - 1}
    with projectors_running(topics, redis_url):
        wait_for(lambda: _all_applied(redis_client, last), what="all three projections")
    return session


def test_verify_reports_a_difference_with_a_nonzero_exit(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    session = _projected_script(topics, redis_client, servers.redis_url, "sess-tampered")
    key = KEYS.session(session.id, "surface", "messages")
    node = session.surface.nodes[-1]
    record = json.loads(redis_client.hget(key, str(node)) or b"{}")
    record["message"]["content"] = [{"type": "text", "text": "tampered"}]
    redis_client.hset(key, str(node), json.dumps(record))

    done = subprocess.run(
        [sys.executable, "-m", "cli", "verify", session.id],
        env=projector_env(topics, servers.redis_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "surface messages vs derive_messages()" in done.stderr
    assert "tampered" in done.stderr


def test_verify_compares_every_audit_record_and_index_with_the_log(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    session = _projected_script(topics, redis_client, servers.redis_url, "sess-audit-tampered")
    reader = Reader(redis_client, Keys())
    log = read_session(topics, session.id)
    assert verify(session.id, log, reader, INTERPRETERS).ok

    # A turn end drops out of the index, and another's recorded reason is changed.
    index_key = KEYS.session(session.id, "audit", "index")
    listed = redis_client.hget(index_key, "turns")
    assert isinstance(listed, bytes), listed
    turns = listed.decode().split(",")
    assert len(turns) >= 2, turns
    redis_client.hset(index_key, "turns", ",".join(turns[:-1]))
    events_key = KEYS.session(session.id, "audit", "events")
    first_end = turns[0]
    record = json.loads(redis_client.hget(events_key, first_end) or b"{}")
    record["data"]["reason"] = {"kind": "tampered"}
    redis_client.hset(events_key, first_end, json.dumps(record))

    report = verify(session.id, log, reader, INTERPRETERS)
    found = "\n".join(report.differences)
    assert len(report.differences) == 2, found
    assert f"audit record of seq {first_end}" in found and "tampered" in found
    assert "audit indexes" in found


def _two_events(session_id: str, time_ms: int) -> dsh.Session:
    session = dsh.Session.create(session_id, clock=lambda: time_ms)
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user("u1", "hello"), "append")
    return session


def test_the_recent_index_lists_the_sessions_that_moved_last(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    tag = f"recent-{uuid.uuid4().hex[:8]}-"
    older = _two_events(tag + "a", 1_700_000_000_000)
    newer = _two_events(tag + "b", 1_700_000_500_000)
    publish(topics, interleave(older, newer))
    with projectors_running(topics, servers.redis_url):
        wait_for(lambda: _all_applied(redis_client, {older.id: 1, newer.id: 1}), what="both")

    inspection = Inspection(redis_client, Keys())
    listed = inspection.recent((tag,), 10)
    assert [(r["session_id"], r["time"], r["applied"], r["blocked"]) for r in listed] == [
        (newer.id, 1_700_000_500_000, 1, False),
        (older.id, 1_700_000_000_000, 1, False),
    ]
    assert [r["session_id"] for r in inspection.recent((tag,), 1)] == [newer.id]
    assert inspection.recent(("nobody-" + tag,), 10) == []


def test_verify_without_an_interpreter_the_log_needs_checks_what_it_can(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    """A `dsh verify` whose process lacks the image/offload interpreter cannot restore the
    session with the core. That says nothing about the transcript and audit (they apply any
    projection type the writer took, never block on it): they are checked against the log.
    The surface matches if its projector lacked the interpreter too (blocked); if it had it,
    the report says the surface could not be verified, and why, not that it is wrong."""
    reader = Reader(redis_client, Keys())
    lacking = scripted_session(f"sess-no-interp-{uuid.uuid4().hex[:6]}").session
    publish(topics, events_of(lacking))
    with projectors_running(topics, servers.redis_url, projections=""):
        done = {"transcript": len(lacking) - 1, "audit": len(lacking) - 1}
        wait_for(
            lambda: (
                all(applied(redis_client, p, lacking.id) == s for p, s in done.items())
                and reader.blocked("surface", lacking.id) is not None
            ),
            what="the transcript and audit applied, the surface blocked",
        )
    report = verify(lacking.id, read_session(topics, lacking.id), reader, {})
    assert report.ok, "\n".join(report.differences)
    assert report.blocked_reason and "PROJECTION_INTERPRETER_MISSING" in report.blocked_reason

    having = _projected_script(topics, redis_client, servers.redis_url, "sess-interp-had")
    report = verify(having.id, read_session(topics, having.id), reader, {})
    assert len(report.differences) == 1, report.differences
    assert report.differences[0].startswith("surface: not verified")

    # A transcript that is wrong is still found.
    redis_client.xtrim(KEYS.session(lacking.id, "transcript"), maxlen=3, approximate=False)
    report = verify(lacking.id, read_session(topics, lacking.id), reader, {})
    assert [d.split(":")[0] for d in report.differences] == ["transcript entries"]
