"""`dsh serve`'s metrics: bounded labels, and the sum its workers' processes share (the whole
server, with two workers, is tests/integration/test_serve_metrics.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from serve.app import create_app
from serve.metrics import MULTIPROC_VARIABLE, multiprocess_directory, workers_registry
from serve.settings import ServeSettings

ROOT = Path(__file__).resolve().parents[2]
# A worker: answers some requests, opens two streams and closes one, says so, and ends when
# its stdin does.
WORKER = """
import sys
from serve.metrics import OPEN_STREAMS, REQUESTS
REQUESTS.labels("/livez", "GET", "2xx").inc(3)
OPEN_STREAMS.inc(2)
OPEN_STREAMS.dec()
print("counted", flush=True)
sys.stdin.read()
"""


def _requests(route: str, method: str, status: str) -> float:
    labels = {"route": route, "method": method, "status": status}
    return REGISTRY.get_sample_value("dsh_serve_requests_total", labels) or 0.0


@pytest.mark.parametrize(
    ("method", "path", "route", "status"),
    [
        ("GET", "/livez", "/livez", "2xx"),
        ("GET", "/v1/sessions/acme-secret-1/surface", "/v1/sessions/{session_id}/surface", "5xx"),
        ("GET", "/no/such/acme-secret-2", "other", "4xx"),
        ("BREW", "/livez", "/livez", "4xx"),  # 405; a made-up method is no label of its own
    ],
)
def test_a_request_is_counted_by_route_template_method_and_status_class(
    method: str, path: str, route: str, status: str
) -> None:
    # No lifespan (no `with`): a read has no clients and fails, a 500 counted as 5xx.
    client = TestClient(create_app(ServeSettings()), raise_server_exceptions=False)
    counted_as = "other" if method not in ("GET", "POST") else method
    before = _requests(route, counted_as, status)
    client.request(method, path)
    assert _requests(route, counted_as, status) == before + 1
    families = REGISTRY.collect()
    values = [v for f in families for s in f.samples for v in s.labels.values()]
    assert not [v for v in values if "secret" in v], "a session id became a label"


def test_the_workers_sum_keeps_a_dead_workers_requests_but_not_its_open_streams() -> None:
    with multiprocess_directory() as directory:
        assert os.environ[MULTIPROC_VARIABLE] == str(directory)
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            for worker in workers:
                assert worker.stdout is not None and worker.stdout.readline() == "counted\n"
            registry = workers_registry(directory)
            labels = {"route": "/livez", "method": "GET", "status": "2xx"}
            assert registry.get_sample_value("dsh_serve_requests_total", labels) == 6
            assert registry.get_sample_value("dsh_serve_open_streams") == 2
            # One ends (uvicorn would start another): its streams ended with it, its
            # requests stay answered.
            workers[0].kill()
            workers[0].wait(10)
            assert registry.get_sample_value("dsh_serve_requests_total", labels) == 6
            assert registry.get_sample_value("dsh_serve_open_streams") == 1
        finally:
            for worker in workers:
                worker.kill()
                worker.communicate(timeout=10)
    assert not directory.exists()
    assert MULTIPROC_VARIABLE not in os.environ
