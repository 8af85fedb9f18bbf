"""`dsh serve`'s app on a real uvicorn, on a free loopback port, in a thread of the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from deploy.local.processes import free_ports
from tests.support.waiting import wait_for


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
