"""Prometheus metrics of `dsh serve`: its requests, by route template and status class, their
duration, and the open transcript streams (the ``SessionClient`` inside records its own,
``producers.client_metrics``).

Labels are bounded: a route is the template it matched (``/v1/sessions/{session_id}/events``,
never a session id), ``other`` when none did (or a request was refused before routing, as
``BodyLimit`` refuses a body); a method outside the standard ones is ``other``.

With ``DSH_SERVE_WORKERS`` > 1 each worker is a process of its own: the parent gives them a
private directory (``PROMETHEUS_MULTIPROC_DIR``, see :func:`multiprocess_directory`) where
prometheus_client keeps their values, and serves ``/metrics`` from it, so one scrape counts
every worker.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from servicekit.metrics import LATENCY_BUCKETS

MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

REQUESTS = Counter(
    "dsh_serve_requests_total",
    "HTTP requests answered, by route template, method and status class (2xx, 4xx, 5xx).",
    ["route", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "dsh_serve_request_seconds",
    "HTTP requests: from their arrival to the end of their response (a transcript stream's "
    "lasts as long as the stream).",
    ["route", "method"],
    buckets=LATENCY_BUCKETS,
)
# livesum: the workers alive now, not those a restart replaced.
OPEN_STREAMS = Gauge(
    "dsh_serve_open_streams",
    "Transcript streams open now (DSH_SERVE_MAX_STREAMS caps each worker's).",
    multiprocess_mode="livesum",
)


def route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else "other"


class Measured:
    """ASGI middleware: each HTTP request is counted and timed once its response ends, however
    it ends (an error the app raised is a 500 to the client)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            route = route_of(scope)
            REQUESTS.labels(route, method, f"{status // 100}xx").inc()
            REQUEST_SECONDS.labels(route, method).observe(time.perf_counter() - started)


@contextmanager
def multiprocess_directory() -> Iterator[Path]:
    """A private directory for the workers' values, named to them by ``PROMETHEUS_MULTIPROC_DIR``
    (set before they start, and so before they import prometheus_client), removed at the end:
    a directory left from an earlier run would add its counts to these."""
    path = Path(tempfile.mkdtemp(prefix="dsh-serve-metrics-"))
    previous = os.environ.get(MULTIPROC_VARIABLE)
    os.environ[MULTIPROC_VARIABLE] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_VARIABLE, None)
        else:
            os.environ[MULTIPROC_VARIABLE] = previous
        shutil.rmtree(path, ignore_errors=True)


_LIVE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db")


class _Workers(Collector):
    """Every worker's values from ``path``; a live gauge of a worker that died (uvicorn
    restarts it under a new pid) is dropped first, so its open streams stop counting. Its
    counters and histograms stay: they are requests it did answer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.registry = CollectorRegistry()
        # prometheus_client's multiprocess module has no type hints.
        MultiProcessCollector(self.registry, path=str(path))  # type: ignore[no-untyped-call]

    def collect(self) -> Iterable[Metric]:
        for name in os.listdir(self.path):
            found = _LIVE_FILE.fullmatch(name)
            if found and not _alive(pid := int(found.group(1))):
                mark_process_dead(pid, str(self.path))  # type: ignore[no-untyped-call]
        return self.registry.collect()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True


def workers_registry(path: Path) -> CollectorRegistry:
    """What the parent of the workers serves on ``/metrics``: the sum of their values."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Workers(path))
    return registry
