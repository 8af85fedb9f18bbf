"""Runs the OpenAI Agents SDK's own session tests (ported unchanged beside this file) against
``DshAgentsSession`` on the real stack.

- The backend: each test module's ``SQLiteSession`` / ``RedisSession`` name is replaced by a
  ``DshAgentsSession`` subclass taking the same constructor arguments. What the SDK backend
  keys a store by (SQLite file, Redis key prefix) becomes part of the dsh session id, with a
  token of the test's own, so sessions are as isolated as the SDK's tests expect.
- The stack: one topic prefix, one writer and one ``SessionClient`` per module (a writer per
  test would spend most of the suite starting writers).
- ``async def`` tests: run in a fresh event loop each, as pytest-asyncio does for the SDK
  (``asyncio_mode = "auto"``), without adding that plugin here.
- ``tests.test_responses``: the one SDK test helper the bodies import (from their bodies too,
  so the name must resolve as it does in the SDK's tree), served by ``sdk_responses``.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import inspect
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import set_tracing_disabled

from producers import SessionClient
from producers.agents_session import DshAgentsSession
from tests.conftest import TEST_PARTITIONS, Servers
from tests.integration.agents_sdk import sdk_responses
from tests.integration.writer_support import running_writer, writer_settings
from tests.support.topics import fresh_topics

set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise
sys.modules.setdefault("tests.test_responses", sdk_responses)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: an async SDK test (run by this conftest)")
    config.addinivalue_line("markers", "serial: the SDK's xdist marker (no meaning here)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
    return True


@pytest.fixture(scope="module")
def sdk_client(servers: Servers) -> Iterator[SessionClient]:
    settings = fresh_topics(servers.bootstrap_servers, TEST_PARTITIONS)
    with running_writer(settings, writer_settings()), SessionClient(settings=settings) as c:
        yield c
    gc.collect()  # run results keep sessions, and with them the closed client (see below)


def _session_id(token: str, store: str, session_id: str) -> str:
    return f"{token}-{hashlib.sha1(store.encode()).hexdigest()[:8]}-{session_id}"


@pytest.fixture(autouse=True)
def dsh_backend(
    request: pytest.FixtureRequest, sdk_client: SessionClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK backends' names in the test module, as DshAgentsSession on this test's stack."""
    token = uuid.uuid4().hex[:8]
    client = sdk_client

    class SQLiteSession(DshAgentsSession):
        def __init__(
            self, session_id: str, db_path: Any = ":memory:", session_settings: Any = None
        ) -> None:
            # ":memory:" is a database of its own per instance, as in SQLite.
            store = uuid.uuid4().hex if str(db_path) == ":memory:" else str(db_path)
            super().__init__(
                _session_id(token, store, session_id), client, session_settings=session_settings
            )
            self.sdk_session_id = session_id

        def close(self) -> None:
            pass  # the client is the fixture's

    class RedisSession(DshAgentsSession):
        def __init__(
            self,
            session_id: str,
            *,
            redis_client: Any = None,
            key_prefix: str = "agents:session",
            ttl: int | None = None,
            session_settings: Any = None,
        ) -> None:
            sid = _session_id(token, key_prefix, session_id)
            super().__init__(sid, client, session_settings=session_settings)
            self.sdk_session_id = session_id

        @classmethod
        def from_url(
            cls,
            session_id: str,
            *,
            url: str,
            redis_kwargs: Any = None,
            session_settings: Any = None,
            **kwargs: Any,
        ) -> RedisSession:
            return cls(session_id, session_settings=session_settings, **kwargs)

        async def ping(self) -> bool:
            return True

        async def close(self) -> None:
            pass

    for name, stand_in in (("SQLiteSession", SQLiteSession), ("RedisSession", RedisSession)):
        if hasattr(request.module, name):
            monkeypatch.setattr(request.module, name, stand_in)
