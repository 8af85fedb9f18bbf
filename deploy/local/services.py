"""The pipeline's own services on the local stack: `dsh writer` and `dsh project <name>`.

They run detached like Kafka and Redis (pid file + log under the state dir, found again by
`dsh status` / `dsh down` from any shell), pointed at the local stack's Kafka and Redis, each
with its /metrics port, and with the reference ``image/offload`` interpreter registered so the
demo's offload is accepted by the writer and projected by the surface projector.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.local.errors import LocalStackError
from deploy.local.processes import ManagedProcess, port_accepts
from deploy.local.settings import LocalStackSettings
from interpreters import OFFLOAD_SPEC
from servicekit.health import failing

PROJECTIONS = ("surface", "transcript", "audit")


@dataclass(frozen=True)
class Service:
    name: str  # "writer", "project-surface", …
    argv: tuple[str, ...]  # after `python -m cli`
    metrics_port: int  # 0: none
    home: Path

    @property
    def log_file(self) -> Path:
        return self.home / "service.log"

    @property
    def exit_file(self) -> Path:
        """Written by the service when it stops cleanly (DSH_SERVICE_EXIT_FILE)."""
        return self.home / "exit.json"

    def process(self) -> ManagedProcess:
        # The marker must be in the command line: `cli writer` / `cli project audit`.
        return ManagedProcess(
            self.name, self.home / "service.pid", self.log_file, "cli " + " ".join(self.argv)
        )

    def metrics_url(self) -> str | None:
        return self.url("/metrics")

    def url(self, path: str) -> str | None:
        """``path`` (``/metrics``, ``/livez``, ``/readyz``) on the service's HTTP port."""
        return f"http://127.0.0.1:{self.metrics_port}{path}" if self.metrics_port else None


class Services:
    """The writer and the three projectors of one local stack."""

    def __init__(self, settings: LocalStackSettings) -> None:
        self.settings = settings
        home = settings.state_dir / "services"
        base = settings.metrics_port

        def port(i: int) -> int:
            return base + i if base else 0

        self.all = [
            Service("writer", ("writer",), port(0), home / "writer"),
            *(
                Service(f"project-{name}", ("project", name), port(i), home / f"project-{name}")
                for i, name in enumerate(PROJECTIONS, 1)
            ),
        ]

    def env(self, service: Service) -> dict[str, str]:
        env = dict(os.environ)
        # The local stack's own servers, whatever the shell points services at otherwise.
        env["DSH_KAFKA_BOOTSTRAP_SERVERS"] = self.settings.bootstrap_servers()
        env["DSH_REDIS_URL"] = self.settings.redis_url()
        if service.name == "writer":
            env["DSH_WRITER_METRICS_PORT"] = str(service.metrics_port)
            env.setdefault("DSH_WRITER_PROJECTIONS", OFFLOAD_SPEC)
        else:
            env["DSH_PROJECTOR_METRICS_PORT"] = str(service.metrics_port)
            env.setdefault("DSH_PROJECTOR_PROJECTIONS", OFFLOAD_SPEC)
        env["DSH_SERVICE_EXIT_FILE"] = str(service.exit_file)
        # Unbuffered: a log line is in the file when it happens, not when a buffer fills.
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self) -> None:
        for service in self.all:
            process = service.process()
            if process.is_running():
                continue
            service.home.mkdir(parents=True, exist_ok=True)
            service.exit_file.unlink(missing_ok=True)
            process.start([sys.executable, "-m", "cli", *service.argv], env=self.env(service))

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Every service alive and answering on its /metrics port (it starts serving /metrics
        only after its settings and clients were built, so an answer means it started)."""
        deadline = time.monotonic() + timeout_s
        for service in self.all:
            process = service.process()
            while not (service.metrics_port == 0 or port_accepts(service.metrics_port)):
                if not process.is_running():
                    raise process.fail("exited during start-up")
                if time.monotonic() > deadline:
                    raise process.fail(f"/metrics port {service.metrics_port} did not open")
                time.sleep(0.1)
            if not process.is_running():
                raise process.fail("exited during start-up")
        self._wait_checks_pass(deadline)

    def _wait_checks_pass(self, deadline: float) -> None:
        """Until every service's ``/readyz`` passes, or the deadline: `dsh status` then names
        what still fails."""
        for service in self.all:
            url = service.url("/readyz")
            while url is not None and time.monotonic() < deadline:
                answer = probe(url)
                if answer is not None and not failing(answer):
                    break
                time.sleep(0.1)

    def wait_writer_serving(self, partitions: int, timeout_s: float = 60.0) -> None:
        """Until the writer owns every commands partition (its gauge says so): before that, an
        append waits for a rebalance or a restore."""
        writer = self.all[0]
        url = writer.metrics_url()
        if url is None:
            return
        deadline = time.monotonic() + timeout_s
        while True:
            owned = _gauge(url, "dsh_writer_partitions_owned")
            if owned is not None and owned >= partitions:
                return
            if not writer.process().is_running():
                raise writer.process().fail("exited during start-up")
            if time.monotonic() > deadline:
                raise LocalStackError(
                    f"the writer owns {owned or 0} of {partitions} partitions after "
                    f"{timeout_s:g}s; see {writer.log_file}",
                    code="TIMEOUT",
                )
            time.sleep(0.2)

    def stop(self) -> int:
        # Signal all first (each finishes its batch in hand concurrently), then wait for each
        # (SIGKILL after the timeout). Counted when signalled: a quick exit is still a stop.
        signalled = [s for s in self.all if s.process().terminate() is not None]
        for service in self.all:
            service.process().stop(timeout_s=20)
        return len(signalled)


def metrics_page(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())
    except OSError:
        return None


def probe(url: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The JSON body of a ``/readyz`` or ``/livez`` answer, ready (200) or not (503); None when
    nothing answers in time."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except OSError:
        return None
    try:
        found = json.loads(body)
    except ValueError:
        return {"checks": {"response": f"not JSON: {body[:200]!r}"}}
    return found if isinstance(found, dict) else {"checks": {"response": str(found)[:200]}}


def _gauge(url: str, name: str) -> float | None:
    text = metrics_page(url)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None
