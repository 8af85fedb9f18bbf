"""`dsh serve`'s app on a real uvicorn, on a free loopback port, in a thread of the test; and
the TypeScript example's tools (docs/examples), installed from its lock file."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from deploy.local.processes import free_ports
from tests.docs_blocks import ROOT
from tests.support.waiting import wait_for

EXAMPLES = ROOT / "docs" / "examples"


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """The base URL of ``app`` served by uvicorn until the block ends."""
    (port,) = free_ports(1)
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
