"""`dsh serve` against the real stack: a writer with two tenants, the three projectors, and
the app on uvicorn, called over HTTP with httpx. Every refusal is checked to have appended
nothing, by reading the session back from the writer."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from deploy.local.processes import free_ports
from producers import SessionClient
from projectors.keys import Keys
from serve.app import create_app
from serve.settings import ServeSettings
from servicekit import kafka_clients
from servicekit.settings import KafkaSettings, RedisSettings
from tests.conftest import Servers
from tests.integration.serve_support import (
    EXAMPLES,
    KEY_SPEC,
    KEYS,
    PREFIXES,
    TOKENS,
    example_tools,
    serving,
    serving_stack,
    wait_until_serving,
)
from tests.support.builders import user
from tests.support.processes import CliProcess, run_dsh, service_env
from tests.support.waiting import wait_for


@dataclass(frozen=True)
class Api:
    url: str
    kafka: KafkaSettings

    def client(self, tenant: str | None = "acme") -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKENS[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def logged(self, session_id: str) -> list[dict[str, Any]]:
        """The session's events as the writer has them (its tenant's credential)."""
        tenant = session_id.split("-", 1)[0]
        with SessionClient(
            settings=self.kafka, tenant=tenant, tenant_key=SecretStr(KEYS[tenant])
        ) as client:
            return [e.to_json() for e in client.read(session_id).events()]


@pytest.fixture(scope="module")
def api(servers: Servers) -> Iterator[Api]:
    with serving_stack(servers, max_body_bytes=64 * 1024, max_events=10) as (url, kafka):
        yield Api(url, kafka)


def sid(tenant: str = "acme") -> str:
    return f"{tenant}-{uuid.uuid4().hex[:10]}"


def ev(type_: str, data: Any, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "data": data, **extra}


TURN = ev("turn/start", {"turn": 1})
HELLO = ev("user/message", user("u1", "hello"), surfaceOp="append")


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["code"] == code, body
    assert body["type"] == "https://dsh-pipeline.dev/problems/" + code.lower().replace("_", "-")
    assert body["title"] and body["detail"]
    return body


def test_append_one_then_read_your_writes_on_the_three_views(api: Api) -> None:
    s = sid()
    with api.client() as http:
        first = http.post(f"/v1/sessions/{s}/events", json={"events": [TURN]})
        assert first.status_code == 200, first.text
        assert first.json()["committed_seq"] == 0
        second = http.post(f"/v1/sessions/{s}/events", json={"events": [HELLO]}).json()
        (event,) = second["events"]
        assert event["seq"] == 1 and event["surfaceOp"] == "append" and event["time"] > 0
        at = {"at_least": second["committed_seq"], "timeout_ms": 20_000}
        surface = http.get(f"/v1/sessions/{s}/surface", params=at).json()
        transcript = http.get(f"/v1/sessions/{s}/transcript", params=at).json()
        audit = http.get(f"/v1/sessions/{s}/audit", params=at).json()
    assert surface["nodes"] == [1] and [m["id"] for m in surface["messages"]] == ["u1"]
    assert [e["type"] for e in transcript["entries"]] == ["turn/start", "user/message"]
    assert sorted(audit["events"]) == ["0", "1"]


def test_many_events_are_one_all_or_nothing_append(api: Api) -> None:
    s = sid()
    with api.client() as http:
        good = http.post(f"/v1/sessions/{s}/events", json={"events": [TURN, HELLO]}).json()
        assert [e["seq"] for e in good["events"]] == [0, 1] and good["committed_seq"] == 1
        # The second event breaks a rule (no surfaceOp): the first is not appended either.
        bad = [
            ev("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
            ev("user/message", user("u2")),
        ]
        refused = http.post(f"/v1/sessions/{s}/events", json={"events": bad})
    assert_problem(refused, 422, "SURFACE_OP_REQUIRED")
    assert len(api.logged(s)) == 2


def test_a_retry_with_the_same_idempotency_key_returns_the_same_events(api: Api) -> None:
    s = sid()
    key = {"Idempotency-Key": f"retry-{uuid.uuid4().hex}"}
    with api.client() as http:
        first = http.post(f"/v1/sessions/{s}/events", json={"events": [TURN]}, headers=key)
        again = http.post(f"/v1/sessions/{s}/events", json={"events": [TURN]}, headers=key)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() and first.json()["request_id"] == key["Idempotency-Key"]
    assert len(api.logged(s)) == 1


def test_one_idempotency_key_sent_to_many_sessions_at_once_appends_to_each(api: Api) -> None:
    """The writer keeps request ids per session: the same key to ten sessions at the same time
    is ten requests, each answered with its own session's event."""
    sessions = [sid() for _ in range(10)]
    key = {"Idempotency-Key": f"shared-{uuid.uuid4().hex}"}
    start = threading.Barrier(len(sessions))

    def append(s: str) -> httpx.Response:
        with api.client() as http:
            start.wait()
            return http.post(f"/v1/sessions/{s}/events", json={"events": [TURN]}, headers=key)

    with ThreadPoolExecutor(len(sessions)) as pool:
        answers = list(pool.map(append, sessions))
    for s, answer in zip(sessions, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.json()["committed_seq"] == 0
        assert len(api.logged(s)) == 1


def test_reads_waiting_for_a_seq_hold_no_thread_from_other_reads(api: Api) -> None:
    """More read-your-writes waits than the server has worker threads (40): a plain read
    made while they all wait is answered before any of them ends."""
    s = sid()
    with api.client() as http:
        http.post(f"/v1/sessions/{s}/events", json={"events": [TURN, HELLO]}).raise_for_status()
        http.get(f"/v1/sessions/{s}/surface", params={"at_least": 1}).raise_for_status()

    def waiting(_: int) -> httpx.Response:
        with api.client() as http:
            ahead = {"at_least": 10**9, "timeout_ms": 8000}
            return http.get(f"/v1/sessions/{s}/transcript", params=ahead)

    with ThreadPoolExecutor(45) as pool:
        waits = [pool.submit(waiting, i) for i in range(45)]
        time.sleep(1)  # every wait is in the server
        with api.client() as http:
            plain = http.get(f"/v1/sessions/{s}/surface")
        assert plain.status_code == 200, plain.text
        assert not any(w.done() for w in waits)
        for w in waits:
            assert_problem(w.result(), 503, "PROJECTION_BEHIND")


def test_an_expected_seq_conflict_is_409_and_appends_nothing(api: Api) -> None:
    s = sid()
    with api.client() as http:
        http.post(f"/v1/sessions/{s}/events", json={"events": [TURN]}).raise_for_status()
        stale = http.post(
            f"/v1/sessions/{s}/events",
            json={"events": [HELLO], "expected_seq": 0},
            headers={"Idempotency-Key": "stale-1"},
        )
    body = assert_problem(stale, 409, "EXPECTED_SEQ_MISMATCH")
    assert body["session_id"] == s and body["request_id"] == "stale-1"
    assert len(api.logged(s)) == 1


def test_a_core_rejection_is_422_with_its_code_and_appends_nothing(api: Api) -> None:
    s = sid()
    with api.client() as http:
        refused = http.post(
            f"/v1/sessions/{s}/events",
            json={"events": [ev("step/start", {"turn": 1, "step": 1})]},
        )
        assert_problem(refused, 422, "NO_OPEN_TURN")
        # Bare mode asked for: the same event is accepted (the session is made without
        # invariants).
        bare = http.post(
            f"/v1/sessions/{s}/events",
            json={"events": [ev("step/start", {"turn": 1, "step": 1})], "invariants": False},
        )
    assert bare.status_code == 200, bare.text
    assert [e["type"] for e in api.logged(s)] == ["step/start"]


def test_the_transcript_stream_delivers_live_entries_and_resumes_after_last_event_id(
    api: Api,
) -> None:
    s = sid()
    received: list[tuple[int, dict[str, Any]]] = []
    opened = threading.Event()

    def listen(headers: dict[str, str], count: int) -> list[tuple[int, dict[str, Any]]]:
        got: list[tuple[int, dict[str, Any]]] = []
        with (
            api.client() as http,
            http.stream("GET", f"/v1/sessions/{s}/transcript/stream", headers=headers) as r,
        ):
            assert r.status_code == 200 and r.headers["content-type"].startswith(
                "text/event-stream"
            )
            opened.set()
            seq = None
            for line in r.iter_lines():
                if line.startswith("id: "):
                    seq = int(line[4:])
                elif line.startswith("data: ") and seq is not None:
                    got.append((seq, json.loads(line[6:])))
                    if len(got) == count:
                        return got
        return got

    thread = threading.Thread(target=lambda: received.extend(listen({}, 2)), daemon=True)
    thread.start()
    assert opened.wait(20)
    with api.client() as http:  # appended while the stream is open: delivered live
        http.post(f"/v1/sessions/{s}/events", json={"events": [TURN, HELLO]}).raise_for_status()
    thread.join(30)
    assert [(seq, e["type"]) for seq, e in received] == [(0, "turn/start"), (1, "user/message")]
    assert received[1][1]["kind"] == "surface"
    # Reconnecting after seq 0: seq 1 first (missed meanwhile), then what comes next.
    opened.clear()
    resumed: list[tuple[int, dict[str, Any]]] = []
    thread = threading.Thread(
        target=lambda: resumed.extend(listen({"Last-Event-ID": "0"}, 2)), daemon=True
    )
    thread.start()
    assert opened.wait(20)
    with api.client() as http:
        hello2 = ev("user/message", user("u2", "again"), surfaceOp="append")
        http.post(f"/v1/sessions/{s}/events", json={"events": [hello2]}).raise_for_status()
    thread.join(30)
    assert [seq for seq, _ in resumed] == [1, 2]


def test_the_streams_of_one_session_share_one_feed_that_ends_with_the_last(api: Api) -> None:
    s = sid()
    streams = 3
    joined = threading.Barrier(streams + 1)
    received: dict[int, list[int]] = {}

    def listen(n: int) -> None:
        seqs = received.setdefault(n, [])
        with (
            api.client() as http,
            http.stream("GET", f"/v1/sessions/{s}/transcript/stream") as r,
        ):
            joined.wait(20)
            for line in r.iter_lines():
                if line.startswith("id: "):
                    seqs.append(int(line[4:]))
                    if len(seqs) == 2:
                        return

    threads = [threading.Thread(target=listen, args=(n,), daemon=True) for n in range(streams)]
    for thread in threads:
        thread.start()
    joined.wait(20)

    def feeds() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == f"feed-{s}"]

    wait_for(lambda: len(feeds()) == 1, 10, "the session's one feed")
    with api.client() as http:
        http.post(f"/v1/sessions/{s}/events", json={"events": [TURN, HELLO]}).raise_for_status()
    for thread in threads:
        thread.join(30)
    assert received == {n: [0, 1] for n in range(streams)}
    assert len(feeds()) <= 1
    wait_for(lambda: not feeds(), 10, "the feed to end after its last stream")


def test_refusals_are_typed_problems_and_append_nothing(api: Api) -> None:
    s, other = sid("acme"), sid("globex")
    url, other_url = f"/v1/sessions/{s}/events", f"/v1/sessions/{other}/events"
    with api.client(None) as anonymous, api.client("acme") as http:
        assert_problem(anonymous.post(url, json={"events": [TURN]}), 401, "UNAUTHORIZED")
        wrong = anonymous.post(
            url, json={"events": [TURN]}, headers={"Authorization": "Bearer not-a-token"}
        )
        assert_problem(wrong, 401, "UNAUTHORIZED")
        assert wrong.headers["www-authenticate"].startswith("Bearer")
        assert_problem(anonymous.get(f"/v1/sessions/{s}/surface"), 401, "UNAUTHORIZED")
        # Another tenant's session: neither written nor read.
        forbidden = http.post(other_url, json={"events": [TURN]})
        assert_problem(forbidden, 403, "TENANT_PREFIX_FORBIDDEN")
        assert_problem(http.get(f"/v1/sessions/{other}/transcript"), 403, "TENANT_PREFIX_FORBIDDEN")
        huge = {"events": [ev("user/message", user("big", "x" * 70_000), surfaceOp="append")]}
        assert_problem(http.post(url, json=huge), 413, "BODY_TOO_LARGE")

        def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it comes
            yield b'{"events": ['
            yield b" " * 70_000
            yield b"]}"

        assert_problem(http.post(url, content=chunked()), 413, "BODY_TOO_LARGE")
        malformed = http.post(
            url, content=b'{"events": [', headers={"content-type": "application/json"}
        )
        assert_problem(malformed, 400, "MALFORMED_JSON")
        assert_problem(http.post(url, json={"event": TURN}), 422, "REQUEST_INVALID")
        assert_problem(http.post(url, json={"events": [TURN] * 11}), 422, "TOO_MANY_EVENTS")
        # The core's own code for sources that are not a list (not a 500 on the way to it).
        scalar = ev("user/message", user("u9", "x"), surfaceOp="append", sourceEventSeqs=5)
        assert_problem(http.post(url, json={"events": [TURN, scalar]}), 422, "SOURCES_INVALID")
        stream = f"/v1/sessions/{s}/transcript/stream"
        for resume in (b"--5", "\u00b2".encode("latin-1"), b"1" * 25, str(2**63).encode()):
            bad_resume = http.get(stream, headers={b"Last-Event-ID": resume})
            assert_problem(bad_resume, 422, "INVALID_LAST_EVENT_ID")
        assert_problem(http.get(stream, params={"after": 2**64}), 422, "REQUEST_INVALID")
        bad_id = http.post("/v1/sessions/acme-{x}/events", json={"events": [TURN]})
        assert_problem(bad_id, 422, "INVALID_SESSION_ID")
        assert_problem(http.get(f"/v1/sessions/{s}/surface"), 404, "SESSION_UNKNOWN")
        behind = http.get(f"/v1/sessions/{s}/surface", params={"at_least": 5, "timeout_ms": 50})
        assert_problem(behind, 503, "PROJECTION_BEHIND")
        assert behind.headers["retry-after"] == "1"
    assert api.logged(s) == [] and api.logged(other) == []


def test_readyz_is_200_with_the_stack_and_503_naming_redis_without_it(
    api: Api, servers: Servers
) -> None:
    with httpx.Client(base_url=api.url) as http:
        assert http.get("/livez").json() == {"status": "alive"}
        ready = http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"kafka": "ok", "redis": "ok"}
    (closed,) = free_ports(1)
    nowhere = RedisSettings(url=SecretStr(f"redis://127.0.0.1:{closed}/0"))
    with (
        serving(create_app(ServeSettings(), api.kafka, nowhere)) as url,
        httpx.Client(base_url=url) as http,
    ):
        assert http.get("/livez").status_code == 200
        not_ready = http.get("/readyz")
    body = assert_problem(not_ready, 503, "NOT_READY")
    assert body["checks"]["kafka"] == "ok" and "REDIS_UNREACHABLE" in body["checks"]["redis"]


def test_readyz_keeps_one_kafka_client_across_probes(
    api: Api, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe every few seconds must not log in to Kafka (TLS, SASL) with a client of its
    own each time: one is made at the first probe and kept."""
    made: list[object] = []
    admin = kafka_clients.admin

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(client := admin(*args, **kwargs))
        return client

    monkeypatch.setattr(kafka_clients, "admin", counted)
    redis = RedisSettings(url=SecretStr(servers.redis_url))
    with (
        serving(create_app(ServeSettings(), api.kafka, redis)) as url,
        httpx.Client(base_url=url) as http,
    ):
        answers = [http.get("/readyz") for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    assert len(made) == 1


def test_without_tokens_the_writer_still_refuses_an_untenanted_append(api: Api) -> None:
    """Auth off in the service does not bypass the writer's own tenant check."""
    s = sid()
    redis = RedisSettings(url=SecretStr("redis://127.0.0.1:1/0"))  # not read here
    with (
        serving(create_app(ServeSettings(), api.kafka, redis)) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        refused = http.post(f"/v1/sessions/{s}/events", json={"events": [TURN]})
    assert_problem(refused, 403, "TENANT_MISSING")
    assert api.logged(s) == []


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node 20 (the example's runtime)")
def test_the_typescript_example_type_checks_then_appends_retries_reads_and_follows(
    api: Api,
) -> None:
    tools = example_tools()
    checked = subprocess.run(
        [str(tools / "tsc"), "--noEmit", "-p", str(EXAMPLES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr  # strict (tsconfig.json)
    s = sid()
    result = subprocess.run(
        [str(tools / "tsx"), str(EXAMPLES / "http-client.ts"), s],
        env={**os.environ, "API_URL": api.url, "API_TOKEN": TOKENS["acme"]},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    steps = [json.loads(line) for line in result.stdout.splitlines()]
    assert steps == [
        {"step": "append", "committed_seq": 1},
        {"step": "retry", "same": True},
        {"step": "surface", "messages": ["u1"]},
        {"step": "stream", "types": ["turn/start", "user/message"]},
    ]
    assert len(api.logged(s)) == 2


def test_streams_beyond_the_limit_are_503_until_one_closes(api: Api, servers: Servers) -> None:
    redis = RedisSettings(url=SecretStr(servers.redis_url))
    app = create_app(ServeSettings(max_streams=1), api.kafka, redis, Keys())
    path = "/v1/sessions/nobody-yet/transcript/stream"
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        with http.stream("GET", path) as first:
            assert first.status_code == 200
            assert_problem(http.get(path), 503, "TOO_MANY_STREAMS")
        # The first client is gone: its slot comes back once the server notices (an idle frame
        # a second at most), and a new stream opens.
        deadline = time.monotonic() + 10
        while True:
            with http.stream("GET", path) as again:
                if again.status_code == 200:
                    break
                assert time.monotonic() < deadline, "the slot never came back"
            time.sleep(0.2)


def test_dsh_serve_runs_two_worker_processes_that_append_and_stop_on_sigterm(
    api: Api, servers: Servers, tmp_path: Path
) -> None:
    digests = ",".join(f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in TOKENS.items())
    (port,) = free_ports(1)
    env = service_env(
        api.kafka,
        DSH_REDIS_URL=servers.redis_url,
        DSH_SERVE_WORKERS="2",
        DSH_SERVE_PORT=str(port),
        DSH_SERVE_TOKENS=digests,
        DSH_SERVE_TENANT_PREFIXES=PREFIXES,
        DSH_SERVE_TENANT_KEYS=KEY_SPEC,
    )
    serve = CliProcess(["serve"], env, tmp_path / "serve.log")
    try:
        workers = wait_until_serving(serve, f"http://127.0.0.1:{port}", 2)
        session = sid()
        client = Api(f"http://127.0.0.1:{port}", api.kafka).client()
        with client:
            first = client.post(f"/v1/sessions/{session}/events", json={"events": [TURN]})
            # Each request on a connection of its own, so the kernel spreads them.
            for n in range(8):
                with Api(f"http://127.0.0.1:{port}", api.kafka).client() as fresh:
                    hello = ev("user/message", user(f"u{n}", f"hello {n}"), surfaceOp="append")
                    reply = fresh.post(f"/v1/sessions/{session}/events", json={"events": [hello]})
                    assert reply.status_code == 200, reply.text
        assert first.status_code == 200, first.text
        assert [e["seq"] for e in api.logged(session)] == list(range(9))
        serve.signal(signal.SIGTERM)
        assert serve.wait(30) == 0, serve.log()
        wait_for(
            lambda: not [pid for pid in workers if Path(f"/proc/{pid}").exists()],
            10,
            "the workers to end with their parent",
        )
    finally:
        serve.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_dsh_serve_ends_its_open_streams_and_exits_promptly_on_sigterm(
    api: Api, servers: Servers, tmp_path: Path, workers: str
) -> None:
    """An open stream never ends by itself: uvicorn waited for it without limit, so SIGTERM
    left the process (and a pod's whole grace period) hanging. The stream ends at its next idle
    second instead (its client resumes elsewhere), and the process exits 0; with workers too,
    which uvicorn's supervisor stops with a SIGTERM of their own."""
    digests = ",".join(f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in TOKENS.items())
    (port,) = free_ports(1)
    env = service_env(
        api.kafka,
        DSH_REDIS_URL=servers.redis_url,
        DSH_SERVE_WORKERS=workers,
        DSH_SERVE_PORT=str(port),
        DSH_SERVE_TOKENS=digests,
        DSH_SERVE_TENANT_PREFIXES=PREFIXES,
        DSH_SERVE_TENANT_KEYS=KEY_SPEC,
    )
    serve = CliProcess(["serve"], env, tmp_path / "serve.log")
    client = Api(f"http://127.0.0.1:{port}", api.kafka).client()
    try:
        wait_until_serving(serve, f"http://127.0.0.1:{port}", int(workers))
        with client.stream("GET", f"/v1/sessions/{sid()}/transcript/stream") as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            assert next(lines) == ": idle"  # the stream is open, its feed running
            serve.signal(signal.SIGTERM)
            stopped = time.monotonic()
            # The stream ends, cleanly: no error reading it. (Not waited for without limit; the
            # bound leaves a loaded machine room.)
            for _ in lines:
                assert time.monotonic() - stopped < 15, "the stream is still open"
        assert serve.wait(15) == 0, serve.log()
    finally:
        client.close()
        serve.close()


def test_integers_beyond_a_seq_are_422_and_append_nothing(api: Api) -> None:
    """A seq is an Avro long: a bigger one is the request's fault (422), not the codec's 500
    on the way to the writer. (Big integers inside an event's data are lossless JSON, kept.)"""
    s = sid()
    too_big = 2**63
    with api.client() as http:
        http.post(f"/v1/sessions/{s}/events", json={"events": [TURN]}).raise_for_status()
        url = f"/v1/sessions/{s}/events"
        for expected in (too_big, 2**64):
            body = {"events": [HELLO], "expected_seq": expected}
            assert_problem(http.post(url, json=body), 422, "REQUEST_INVALID")
        for view in ("surface", "transcript", "audit"):
            read = http.get(f"/v1/sessions/{s}/{view}", params={"at_least": too_big})
            assert_problem(read, 422, "REQUEST_INVALID")
        assert_problem(http.get(f"/v1/sessions/{s}/provenance/{too_big}"), 422, "REQUEST_INVALID")
        cited = ev("user/message", user("u9", "x"), surfaceOp="append", sourceEventSeqs=[too_big])
        assert_problem(http.post(url, json={"events": [cited]}), 422, "SOURCES_NOT_EARLIER")
    assert len(api.logged(s)) == 1


@pytest.mark.parametrize("workers", ["1", "2"])
def test_dsh_serve_refuses_a_bad_token_table_at_start_with_any_number_of_workers(
    workers: str,
) -> None:
    """With workers, each used to fail on its own and uvicorn's supervisor restarted it
    forever; the table is checked before any worker starts, as with one."""
    (port,) = free_ports(1)
    env = service_env(
        KafkaSettings(bootstrap_servers="127.0.0.1:1"),  # never reached
        DSH_SERVE_WORKERS=workers,
        DSH_SERVE_PORT=str(port),
        DSH_SERVE_TOKENS="acme=not-a-digest",
        DSH_SERVE_TENANT_PREFIXES=PREFIXES,
        DSH_SERVE_TENANT_KEYS=KEY_SPEC,
    )
    result = run_dsh(env, "serve", timeout=30)
    assert result.returncode == 1, result.stderr
    assert "dsh: error [SERVE_TOKENS]: DSH_SERVE_TOKENS: tenant 'acme'" in result.stderr


def test_an_empty_idempotency_key_is_422_not_a_generated_one(api: Api) -> None:
    """An empty key was taken for none and replaced by a fresh one: the caller's retry, with
    the same empty key, then appended twice."""
    s = sid()
    with api.client() as http:
        for _ in range(2):  # the caller's try, then its retry
            empty = http.post(
                f"/v1/sessions/{s}/events", json={"events": [TURN]}, headers={"Idempotency-Key": ""}
            )
            assert_problem(empty, 422, "INVALID_IDEMPOTENCY_KEY")
    assert api.logged(s) == []
