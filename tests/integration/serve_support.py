"""`dsh serve`'s app on a real uvicorn, on a free loopback port, in a thread of the test; and
the whole stack behind it, with two tenants; and the TypeScript example's tools (docs/examples),
installed from its lock file."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr

from deploy.local.processes import free_ports
from projectors.keys import Keys
from servicekit.settings import KafkaSettings, RedisSettings
from tests.conftest import TEST_PARTITIONS, Servers
from tests.docs_blocks import ROOT
from tests.integration.projector_support import projectors_running
from tests.integration.writer_support import running_writer, writer_settings
from tests.support.processes import CliProcess
from tests.support.topics import fresh_topics
from tests.support.waiting import wait_for

# Two tenants: each token's tenant may use only its own prefix, and appends with its key.
KEYS = {"acme": "acme-key-" + uuid.uuid4().hex, "globex": "globex-key-" + uuid.uuid4().hex}
TOKENS = {"acme": "acme-token-" + uuid.uuid4().hex, "globex": "globex-token-" + uuid.uuid4().hex}
PREFIXES = "acme=acme-,globex=globex-"
KEY_SPEC = ",".join(f"{t}={k}" for t, k in KEYS.items())

EXAMPLES = ROOT / "docs" / "examples"


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """The base URL of ``app`` served by uvicorn until the block ends."""
    (port,) = free_ports(1)
    # A server in a thread gets no signal, so its streams do not drain (serve.draining): the
    # timeout cuts them. `dsh serve` itself is stopped by SIGTERM in test_http_api.py.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), 20, "uvicorn to start")
        assert server.started, "uvicorn did not start (see the log above)"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def example_tools() -> Path:
    """docs/examples/node_modules/.bin with the pinned tsc and tsx, installed by ``npm ci``
    (into the ignored node_modules) when missing or older than the lock file."""
    installed = EXAMPLES / "node_modules" / ".package-lock.json"
    lock = EXAMPLES / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        npm = shutil.which("npm")
        assert npm, "npm is needed to install the example's tools (Node 20 ships it)"
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=EXAMPLES,
            check=True,
            timeout=300,
        )
    return EXAMPLES / "node_modules" / ".bin"


@contextmanager
def serving_stack(servers: Servers, **serve: Any) -> Iterator[tuple[str, KafkaSettings]]:
    """Fresh topics, a writer and the three projectors on them, and the app in front, with the
    two tenants' tokens (``serve``: other ``ServeSettings``); yields its URL and the topics."""
    from serve.app import create_app  # the serve extra, only where a test serves
    from serve.settings import ServeSettings

    kafka = fresh_topics(servers.bootstrap_servers, TEST_PARTITIONS)
    digests = ",".join(f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in TOKENS.items())
    tenancy: dict[str, Any] = {"tenant_prefixes": PREFIXES, "tenant_keys": SecretStr(KEY_SPEC)}
    settings = ServeSettings(tokens=SecretStr(digests), **tenancy, **serve)
    redis = RedisSettings(url=SecretStr(servers.redis_url))
    with (
        running_writer(kafka, writer_settings(**tenancy)),
        projectors_running(kafka, servers.redis_url),
        serving(create_app(settings, kafka, redis, Keys())) as url,
    ):
        yield url, kafka


def children(pid: int) -> list[int]:
    """uvicorn's worker processes under ``pid`` (multiprocessing's, not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


def wait_until_serving(serve: CliProcess, base: str, workers: int) -> list[int]:
    """Waits until ``dsh serve`` (``serve``, at ``base``) runs its ``workers`` worker processes
    (1: uvicorn serves in its own) and is ready; returns the workers' pids."""
    found: list[int] = []

    def ready() -> bool:
        found[:] = children(serve.pid)
        if workers > 1 and len(found) < workers:
            return False
        try:
            return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(ready, 60, f"dsh serve with {workers} worker(s), ready", explain=serve.log)
    return found
