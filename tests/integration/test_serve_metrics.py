"""`dsh serve`'s Prometheus metrics, from the process itself on its own port: requests by route
template and status class, their duration, open streams, and the SessionClient's round trips;
with two workers, each scrape counts both (the parent serves what they share)."""

from __future__ import annotations

import hashlib
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.local.processes import free_ports
from servicekit.settings import KafkaSettings
from tests.conftest import Servers
from tests.integration.serve_support import (
    KEY_SPEC,
    PREFIXES,
    TOKENS,
    children,
    serving_stack,
    wait_until_serving,
)
from tests.support.builders import user
from tests.support.processes import CliProcess, service_env
from tests.support.waiting import wait_for

EVENTS = "/v1/sessions/{session_id}/events"
STREAM = "/v1/sessions/{session_id}/transcript/stream"
APPENDS = 4


@pytest.fixture(scope="module")
def kafka(servers: Servers) -> Iterator[KafkaSettings]:
    """The writer and projectors `dsh serve` needs (the app in front of them is not used)."""
    with serving_stack(servers) as (_, topics):
        yield topics


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def multiproc_dir(pid: int) -> Path:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    (entry,) = [e for e in environ if e.startswith(b"PROMETHEUS_MULTIPROC_DIR=")]
    return Path(entry.split(b"=", 1)[1].decode())


@pytest.mark.parametrize("workers", [1, 2])
def test_dsh_serve_counts_every_workers_requests_on_its_metrics_port(
    kafka: KafkaSettings, servers: Servers, tmp_path: Path, workers: int
) -> None:
    digests = ",".join(f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in TOKENS.items())
    port, metrics_port = free_ports(2)
    env = service_env(
        kafka,
        DSH_REDIS_URL=servers.redis_url,
        DSH_SERVE_WORKERS=str(workers),
        DSH_SERVE_PORT=str(port),
        DSH_SERVE_METRICS_PORT=str(metrics_port),
        DSH_SERVE_TOKENS=digests,
        DSH_SERVE_TENANT_PREFIXES=PREFIXES,
        DSH_SERVE_TENANT_KEYS=KEY_SPEC,
        DSH_SERVE_ACCESS_LOG="false",
    )
    serve = CliProcess(["serve"], env, tmp_path / "serve.log")
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {TOKENS['acme']}"}
    session = f"acme-{uuid.uuid4().hex[:10]}"
    try:
        wait_until_serving(serve, base, workers)
        # Each request on a connection of its own, so the kernel may hand it to any worker.
        for n in range(APPENDS):
            event = {"type": "user/message", "data": user(f"u{n}", "hi"), "surfaceOp": "append"}
            body = {"events": [{"type": "turn/start", "data": {"turn": 1}}] if n == 0 else [event]}
            reply = httpx.post(f"{base}/v1/sessions/{session}/events", json=body, headers=auth)
            assert reply.status_code == 200, reply.text
        assert httpx.post(f"{base}/v1/sessions/{session}/events", json={}).status_code == 401
        assert httpx.get(f"{base}/no/such/{session}").status_code == 404
        livez = 1
        assert httpx.get(f"{base}/livez").status_code == 200
        if workers > 1:
            # Until both workers have answered one: then a scrape that saw one worker's counts
            # only would come short.
            directory = multiproc_dir(children(serve.pid)[0])

            def both_answered() -> bool:
                nonlocal livez
                assert httpx.get(f"{base}/livez").status_code == 200
                livez += 1
                return len(list(directory.glob("counter_*.db"))) >= 2

            wait_for(both_answered, 30, "both workers to answer a request")

        with httpx.Client(base_url=base, headers=auth, timeout=30) as http:
            with http.stream("GET", f"/v1/sessions/{session}/transcript/stream") as stream:
                assert stream.status_code == 200
                next(stream.iter_lines())  # open: the first entry
                open_now = scrape(metrics_port)
                assert value(open_now, "dsh_serve_open_streams") == 1

            def closed() -> bool:
                samples = scrape(metrics_port)
                answered = value(samples, "dsh_serve_requests_total", route=STREAM)
                return value(samples, "dsh_serve_open_streams") == 0 and answered == 1

            wait_for(closed, 10, "the closed stream to stop counting and be counted")

        for _ in range(3):  # the same counts each time, whichever worker answered what
            samples = scrape(metrics_port)
            requests = "dsh_serve_requests_total"
            assert value(samples, requests, route=EVENTS, method="POST", status="2xx") == APPENDS
            assert value(samples, requests, route=EVENTS, method="POST", status="4xx") == 1
            assert value(samples, requests, route="other", status="4xx") == 1
            assert value(samples, requests, route="/livez", status="2xx") == livez
            assert value(samples, requests, route=STREAM, method="GET", status="2xx") == 1
            seconds = "dsh_serve_request_seconds_count"
            assert value(samples, seconds, route=EVENTS, method="POST") == APPENDS + 1
            committed = value(samples, "dsh_client_append_seconds_count", result="committed")
            assert committed == APPENDS
        # No session id (nor token) in any label: their number has no bound.
        assert not [key for key in samples if any(session in v for _, v in key[1])]

        serve.signal(signal.SIGTERM)
        assert serve.wait(30) == 0, serve.log()
        if workers > 1:
            assert not directory.exists(), "the workers' metrics directory outlived them"
    finally:
        serve.close()
