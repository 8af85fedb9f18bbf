"""The `dsh` command against a real pipeline: the demo's session, every read command (and its
--json), `dsh tail`, and the errors that name their fix (broker, topic, Redis, blocked or
unknown session). A writer and the three projectors run in threads of this process; each
command runs as a subprocess, as a user would run it."""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

import dsh
from cli import build_parser
from cli.demo import DemoRun, run_demo
from cli.demo_script import TURNS, run_script
from cli.render import render_demo
from deploy.local.processes import free_ports
from interpreters import OFFLOAD_SPEC, offload_images
from producers import SessionClient
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.topic_reader import read_session
from servicekit.settings import KafkaSettings
from tests.conftest import TEST_PARTITIONS
from tests.integration.projector_support import (
    projectors_running,
    publish,
    scripted_session,
)
from tests.integration.writer_support import running_writer, writer_settings
from tests.support.processes import run_dsh
from tests.support.topics import fresh_topics
from tests.support.waiting import wait_for


@dataclass
class Pipeline:
    kafka: KafkaSettings
    redis_url: str
    key_prefix: str
    run: DemoRun
    client: SessionClient
    env: dict[str, str]


def _env(kafka: KafkaSettings, redis_url: str, key_prefix: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env.update(
        DSH_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
        DSH_KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        DSH_REDIS_URL=redis_url,
        DSH_PROJECTOR_KEY_PREFIX=key_prefix,
        DSH_PROJECTOR_GROUP_PREFIX=f"g-{kafka.topic_prefix}",
    )
    env.update(extra)
    return env


def _dsh(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_dsh(env, *args, timeout=timeout)


@pytest.fixture(scope="module")
def pipeline(servers: Any) -> Iterator[Pipeline]:
    """The demo's session, appended through a real writer and projected by real projectors
    (the same interpreter spec as the local stack)."""
    kafka = fresh_topics(servers.bootstrap_servers, TEST_PARTITIONS)
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    with (
        running_writer(kafka, writer_settings(projections=OFFLOAD_SPEC)),
        projectors_running(kafka, servers.redis_url, projections=OFFLOAD_SPEC, key_prefix=prefix),
        SessionClient(settings=kafka) as client,
    ):
        reader = Reader(redis.Redis.from_url(servers.redis_url), Keys(prefix))
        run = run_demo(client, reader, timeout_s=60)
        yield Pipeline(
            kafka, servers.redis_url, prefix, run, client, _env(kafka, servers.redis_url, prefix)
        )


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_the_demo_session_projects_what_the_core_derives(pipeline: Pipeline) -> None:
    run = pipeline.run
    # The same script on the in-process core: the pipeline's read models must agree with it.
    local = dsh.Session.create("local")
    local.register_message_projection("image/offload", offload_images)
    script = run_script(
        lambda t, d, op, src: local.append(t, d, surface_op=op, source_event_seqs=src)
    )
    assert _plain(run.surface.messages) == _plain(local.derive_messages())
    assert run.surface.nodes == list(local.surface.nodes) == script.nodes
    # What the model sees: the prompt, the summary, then the turns after it; the screenshot
    # offloaded and the long tool output trimmed.
    texts = [json.dumps(m["content"]) for m in run.surface.messages]
    assert "Summary of turns 1-10" in texts[1]
    assert "[image offloaded to blob://demo/ci-dashboard.png]" in texts[2]
    assert "lines trimmed" in texts[4]
    # The human transcript keeps every turn, the image and the full tool output.
    assert sum(e.type == "turn/start" for e in run.transcript) == len(TURNS)
    assert "pull layer 17/40" in json.dumps([e.event for e in run.transcript])
    assert any(e.type == "assistant/attempt" for e in run.transcript)
    # Provenance: the summary replaced 38 nodes and cites each one.
    replaced = run.audit.replaced(run.script.summary_seq)
    assert [r["seq"] for r in replaced] == run.script.summarized and len(replaced) == 38
    assert all(run.audit.shadowed_by[s] == run.script.summary_seq for s in run.script.summarized)
    # The fork sees the parent's messages plus its own question and answer.
    assert _plain(run.fork_surface.messages[:-2]) == _plain(run.surface.messages)
    text = render_demo(run)
    for heading in ("1. WHAT THE MODEL SEES NEXT", "2. WHAT THE HUMAN", "3. PROVENANCE", "4. THE"):
        assert heading in text


def test_demo_no_up_runs_against_a_running_pipeline(pipeline: Pipeline) -> None:
    done = _dsh(pipeline.env, "demo", "--no-up", "--json")
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["session"] != pipeline.run.session_id  # every run is a new session
    assert run["surface"]["messages"] == _plain(pipeline.run.surface.messages)
    assert len(run["summary"]["replaced"]) == 38 and run["forkEvents"] > run["events"]


def test_show_prints_each_read_model_as_json(pipeline: Pipeline) -> None:
    sid, run = pipeline.run.session_id, pipeline.run
    surface = _dsh(pipeline.env, "show", "surface", sid, "--json")
    assert surface.returncode == 0, surface.stderr
    assert json.loads(surface.stdout) == _plain(run.surface.to_json())
    transcript = _dsh(pipeline.env, "show", "transcript", sid, "--json")
    assert [e["seq"] for e in json.loads(transcript.stdout)] == [e.seq for e in run.transcript]
    audit = json.loads(_dsh(pipeline.env, "show", "audit", sid, "--json").stdout)
    summary = audit["events"][str(run.script.summary_seq)]
    assert summary["shadowed"] == run.script.summarized
    human = _dsh(pipeline.env, "show", "surface", sid)
    assert human.returncode == 0 and "Summary of turns 1-10" in human.stdout


def test_verify_and_replay_report_as_json(pipeline: Pipeline) -> None:
    sid = pipeline.run.session_id
    verify = _dsh(pipeline.env, "verify", sid, "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["ok"] is True
    replay = _dsh(pipeline.env, "replay", sid, "--json")
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["sessions"] == 1
    again = _dsh(pipeline.env, "verify", pipeline.run.fork_id)
    assert again.returncode == 0 and "match the core" in again.stdout


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    assert proc.stdout is not None
    return _lines_of(proc.stdout)


def _lines_of(stream: Any) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_tail_prints_the_last_entries_then_follows(pipeline: Pipeline) -> None:
    sid = pipeline.run.session_id
    last = pipeline.run.script.last_seq
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "tail", sid, "-n", "2", "--json"],
        env=pipeline.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _lines(proc)
        first = [json.loads(lines.get(timeout=30)) for _ in range(2)]
        assert [e["seq"] for e in first] == [last - 2, last]  # the step/end is not an entry
        note = {
            "id": "late",
            "role": "user",
            "content": [{"type": "text", "text": "one more"}],
            "source": {"kind": "user"},
        }
        pipeline.client.append(sid, "user/message", note, surface_op="append")
        followed = json.loads(lines.get(timeout=30))
        assert followed["seq"] == last + 1 and followed["data"]["id"] == "late"
    finally:
        proc.terminate()
        proc.wait(10)


def test_help_lists_every_command_and_every_read_command_has_json() -> None:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands: dict[str, argparse.ArgumentParser] = action.choices
    text = parser.format_help()
    for name in commands:
        assert f"dsh {name}" in text, name
    for name in ("show", "tail", "verify", "replay", "status", "up", "demo", "import", "export"):
        options = {o for a in commands[name]._actions for o in a.option_strings}
        assert "--json" in options, name


def test_errors_name_the_fix(pipeline: Pipeline) -> None:
    (dead,) = free_ports(1)
    env = pipeline.env
    unreachable = _dsh(
        {**env, "DSH_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{dead}"}, "verify", "x", "--timeout", "1"
    )
    assert unreachable.returncode == 1
    assert "dsh: error [KAFKA_UNREACHABLE]" in unreachable.stderr
    assert "is Kafka running? `dsh up`" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr and "%3|" not in unreachable.stderr

    demo = _dsh(
        {**env, "DSH_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{dead}"}, "demo", "--no-up",
        "--timeout", "1",
    )  # fmt: skip
    assert demo.returncode == 1 and "[KAFKA_UNREACHABLE]" in demo.stderr

    missing = _dsh({**env, "DSH_KAFKA_TOPIC_PREFIX": "nobody.made.these"}, "replay", "--json")
    assert missing.returncode == 1
    assert "dsh: error [TOPIC_MISSING]" in missing.stderr
    assert "`dsh up` creates them" in missing.stderr and "DSH_KAFKA_TOPIC_PREFIX" in missing.stderr

    no_redis = _dsh({**env, "DSH_REDIS_URL": f"redis://127.0.0.1:{dead}/0"}, "show", "audit", "x")
    assert no_redis.returncode == 1
    assert (
        "dsh: error [REDIS_UNREACHABLE]" in no_redis.stderr and "Traceback" not in no_redis.stderr
    )
    # redis-py says so of a Redis Cluster with another exception, not a ConnectionError.
    no_cluster = _dsh(
        {**env, "DSH_REDIS_URL": f"redis://127.0.0.1:{dead}/0", "DSH_REDIS_CLUSTER": "true"},
        "show", "surface", "x",
    )  # fmt: skip
    assert no_cluster.returncode == 1
    assert (
        "dsh: error [REDIS_UNREACHABLE]" in no_cluster.stderr
        and "Traceback" not in no_cluster.stderr
    )

    unknown = _dsh(env, "show", "surface", "no-such-session")
    assert unknown.returncode == 1 and "dsh: error [SESSION_UNKNOWN]" in unknown.stderr


def test_verify_reports_progress_through_the_partition_and_ends_at_the_real_count(
    pipeline: Pipeline,
) -> None:
    calls: list[tuple[int, int]] = []
    items = read_session(
        pipeline.kafka, pipeline.run.session_id, progress=lambda d, t: calls.append((d, t))
    )
    # Other tests of this module may have appended to the session since the demo ran.
    assert [item.seq for item in items] == list(range(len(items)))  # type: ignore[union-attr]
    assert len(items) >= pipeline.run.script.last_seq + 1
    done, total = calls[-1]
    assert done == total >= len(items)  # the bar ends full, at the records really read


def test_show_during_a_rebuild_says_what_it_printed_may_be_stale(pipeline: Pipeline) -> None:
    from pydantic import SecretStr

    from cli.wiring import build_runtime
    from projectors.settings import ProjectorSettings
    from servicekit.settings import RedisSettings

    sid = pipeline.run.session_id
    runtime = build_runtime(
        "surface",
        pipeline.kafka,
        RedisSettings(url=SecretStr(pipeline.redis_url)),
        ProjectorSettings(key_prefix=pipeline.key_prefix),
    )
    with runtime.rebuilds.marked([sid], "test"):
        shown = _dsh(pipeline.env, "show", "surface", sid)
        assert shown.returncode == 1
        assert "applied seq" in shown.stdout  # the view as it stands is still printed
        assert "dsh: error [SESSION_REBUILDING]" in shown.stderr and "(test, since" in shown.stderr
        other = _dsh(pipeline.env, "show", "transcript", sid)
        assert other.returncode == 0  # only the surface is being rebuilt
    assert _dsh(pipeline.env, "show", "surface", sid).returncode == 0


def test_an_unknown_session_is_an_error_everywhere(pipeline: Pipeline) -> None:
    """No command makes up an answer for an id it does not know: `show` prints nothing,
    `verify` does not call nothing a match, and `tail` says what it is waiting for."""
    env = pipeline.env
    for projection in ("surface", "transcript", "audit"):
        shown = _dsh(env, "show", projection, "nope-xyz")
        assert shown.returncode == 1, projection
        assert shown.stdout == "", projection
        assert "dsh: error [SESSION_UNKNOWN]" in shown.stderr, projection
    verified = _dsh(env, "verify", "nope-xyz")
    assert verified.returncode == 1
    assert "dsh: error [SESSION_UNKNOWN]" in verified.stderr and "match" not in verified.stdout
    as_json = _dsh(env, "verify", "nope-xyz", "--json")
    assert as_json.returncode == 1 and "[SESSION_UNKNOWN]" in as_json.stderr

    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "tail", "nope-xyz"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        said = _lines_of(proc.stderr).get(timeout=30)
        assert "waiting for session nope-xyz" in said
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_blocked_session_is_an_error_saying_why(servers: Any) -> None:
    """Projectors without the image/offload interpreter block the session's surface; an
    undecodable record blocks every projection of its session, the transcript included."""
    kafka = fresh_topics(servers.bootstrap_servers, TEST_PARTITIONS)
    prefix = f"blk-{uuid.uuid4().hex[:8]}"
    needs = scripted_session("needs-offload").session
    publish(kafka, [(needs.id, e.to_json()) for e in needs.events()])
    publish(kafka, [("garbled", b"\x00not an event")])
    env = _env(kafka, servers.redis_url, prefix)
    reader = Reader(redis.Redis.from_url(servers.redis_url), Keys(prefix))
    with projectors_running(kafka, servers.redis_url, projections="", key_prefix=prefix):
        wait_for(
            lambda: (
                bool(reader.blocked("surface", needs.id))
                and bool(reader.blocked("transcript", "garbled"))
            ),
            what="both sessions blocked",
        )
    shown = _dsh(env, "show", "surface", needs.id)
    assert shown.returncode == 1
    assert "BLOCKED at seq" in shown.stdout  # the view up to the block is still printed
    assert "dsh: error [SESSION_BLOCKED]" in shown.stderr
    assert "MISSING_INTERPRETER" in shown.stderr and "image/offload" in shown.stderr
    assert f"`dsh replay {needs.id}`" in shown.stderr
    as_json = _dsh(env, "show", "surface", needs.id, "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["blocked"]["seq"] >= 0

    tail = _dsh(env, "tail", "garbled", timeout=30)
    assert tail.returncode == 1
    assert "dsh: error [SESSION_BLOCKED]" in tail.stderr and "transcript" in tail.stderr
