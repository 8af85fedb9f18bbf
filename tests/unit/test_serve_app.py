"""What `dsh serve`'s lifespan makes, without a pipeline: its clients connect lazily."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from typing import Any, cast

from fastapi.testclient import TestClient
from pydantic import SecretStr

from serve.app import create_app, redis_connections
from serve.clients import Clients
from serve.settings import ServeSettings
from servicekit.kafka_errors import KafkaUnreachableError
from servicekit.settings import RedisSettings


def test_every_worker_thread_and_feed_can_hold_a_redis_connection_at_once() -> None:
    """A session feed holds a Redis connection in its blocking read: with more streamed
    sessions than redis-py's default pool (100), the pool must still give each feed and each
    worker thread one, or the 101st stream and every read beside the open ones fail with
    MaxConnectionsError."""
    settings = ServeSettings(max_streams=1000)
    redis = RedisSettings(url=SecretStr("redis://127.0.0.1:1/0"))  # never connected here
    with TestClient(create_app(settings, redis=redis)) as client:
        pool = client.app.state.clients.redis.connection_pool  # type: ignore[attr-defined]
        assert pool.max_connections == redis_connections(settings) == 1040


def _clients(make: Any) -> Clients:
    clients: Any = object.__new__(Clients)
    clients._appenders, clients._making, clients.appender = {}, {}, make
    return cast(Clients, clients)


def test_a_tenants_first_appends_wait_for_one_making_of_its_client_holding_no_thread() -> None:
    """While a tenant's client is made (a Kafka round trip, long while Kafka is away), the
    appends that come for it wait on the event loop for that one making, not each on a
    worker thread of their own; a failed making fails them all, and the next append tries
    again."""
    made: list[str | None] = []
    gate, entered = threading.Event(), threading.Event()

    def make(tenant: str | None) -> Any:
        made.append(tenant)
        entered.set()
        assert gate.wait(10)
        if len(made) == 1:
            raise KafkaUnreachableError("no broker answered")
        return f"client of {tenant}"

    async def burst(clients: Clients) -> list[Any]:
        waiting = [asyncio.ensure_future(clients.appender_for("acme")) for _ in range(50)]
        assert await asyncio.to_thread(entered.wait, 10)
        await asyncio.sleep(0.2)  # time for any other making to start
        assert made == ["acme"]  # one making, on one thread
        gate.set()
        return await asyncio.gather(*waiting, return_exceptions=True)

    clients = _clients(make)
    failed = asyncio.run(burst(clients))
    assert all(isinstance(f, KafkaUnreachableError) for f in failed) and not clients._making
    again: Any = asyncio.run(clients.appender_for("acme"))
    assert again == "client of acme"  # made again
    assert made == ["acme", "acme"]


def _app_with_a_token(token: str) -> Any:
    digest = hashlib.sha256(token.encode()).hexdigest()
    settings = ServeSettings(
        tokens=SecretStr(f"acme={digest}"),
        tenant_prefixes="acme=acme-",
        tenant_keys=SecretStr("acme=acme-key"),
    )
    return create_app(settings, redis=RedisSettings(url=SecretStr("redis://127.0.0.1:1/0")))


def test_a_body_is_not_read_before_its_caller_is_known() -> None:
    """FastAPI parses a route's JSON body before the route's dependencies check the token:
    an unknown caller must get 401 without its body being read, so malformed or deeply nested
    JSON (or a megabyte of it) from anyone costs no parsing and reveals nothing."""
    received: list[bytes] = []

    def counted_body() -> Any:
        for part in (b'{"events": [', b"[" * 5_000):
            received.append(part)
            yield part

    with TestClient(_app_with_a_token("good-token")) as client:
        url = "/v1/sessions/acme-1/events"
        for token in ({}, {"Authorization": "Bearer wrong-token"}):
            headers = {"content-type": "application/json", **token}
            answer = client.post(url, content=counted_body(), headers=headers)
            assert answer.status_code == 401, answer.text
            assert answer.json()["code"] == "UNAUTHORIZED"
            assert answer.headers["www-authenticate"].startswith("Bearer")
        assert received == []  # the test client sends a body only as the app reads it
        # The known caller's malformed body is parsed, and refused as such.
        answer = client.post(
            url,
            content=b'{"events": [',
            headers={"Authorization": "Bearer good-token", "content-type": "application/json"},
        )
        assert answer.status_code == 400 and answer.json()["code"] == "MALFORMED_JSON"
