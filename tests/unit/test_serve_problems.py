"""The service's answers to what goes wrong under it and to malformed requests, without a
pipeline: each is a typed problem, never a 500 or FastAPI's generic 400."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from redis import exceptions as redis_errors

from serve.app import create_app
from serve.settings import ServeSettings
from servicekit.settings import KafkaSettings, RedisSettings

NOWHERE_REDIS = RedisSettings(url=SecretStr("redis://127.0.0.1:1/0"))  # never connected here
NOWHERE_KAFKA = KafkaSettings(bootstrap_servers="127.0.0.1:1")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(ServeSettings(), NOWHERE_KAFKA, NOWHERE_REDIS)
    with TestClient(app, raise_server_exceptions=False) as client:
        # An append that gets past the checks under test is a 500, at once, not a wait for
        # a Kafka that is not there.
        client.app.state.clients.appender_for = _reached_the_writer  # type: ignore[attr-defined]
        yield client


async def _reached_the_writer(tenant: str | None) -> Any:
    raise AssertionError("the append reached the writer")


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


class _FailingViews:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def waits(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


def _raised_from(error: Exception, cause: Exception) -> Exception:
    """``error`` as ``raise error from cause`` leaves it: how redis-py reports a Redis Cluster
    none of whose nodes answers (``RedisClusterUnreachableError`` from 8.2 on)."""
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "error",
    [
        redis_errors.ConnectionError("refused"),
        redis_errors.TimeoutError("timed out"),
        redis_errors.ClusterDownError("CLUSTERDOWN The cluster is down"),
        redis_errors.MasterDownError("MASTERDOWN Link with MASTER is down"),
        redis_errors.TryAgainError("TRYAGAIN"),
        redis_errors.ReadOnlyError("READONLY You can't write against a read only replica"),
        _raised_from(
            redis_errors.RedisClusterException("Redis Cluster cannot be connected"),
            redis_errors.ConnectionError("refused"),
        ),
        redis_errors.SlotNotCoveredError("slot 3 is not covered"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_redis_out_of_reach_in_any_way_is_503_with_retry_after(
    client: TestClient, error: Exception
) -> None:
    """A cluster failing over (CLUSTERDOWN, TRYAGAIN), a primary demoted (READONLY) or no node
    answering are Redis out of reach for a while, as a refused connection is: retry later."""
    clients: Any = client.app.state.clients  # type: ignore[attr-defined]
    views, clients.views = clients.views, _FailingViews(error)
    try:
        response = client.get("/v1/sessions/s-1/surface")
    finally:
        clients.views = views
    body = assert_problem(response, 503, "REDIS_UNREACHABLE")
    assert type(error).__name__ in body["detail"]
    assert response.headers["retry-after"] == "1"


def test_a_redis_cluster_error_that_is_not_an_outage_is_a_500(client: TestClient) -> None:
    """A command across slots is a bug of ours, not Redis away: no retrying it helps."""
    clients: Any = client.app.state.clients  # type: ignore[attr-defined]
    error = redis_errors.RedisClusterException("keys in request don't hash to the same slot")
    views, clients.views = clients.views, _FailingViews(error)
    try:
        response = client.get("/v1/sessions/s-1/surface")
    finally:
        clients.views = views
    assert_problem(response, 500, "INTERNAL")


@pytest.mark.parametrize(
    "body",
    [
        b'{"events": [',  # cut short
        b'{"events": [{"type": "user/message", "data": "\xff\xfe"}]}',  # not UTF-8
        b'{"events": [{"type": "user/message", "data": "caf\xe9"}]}',  # Latin-1
        b'{"events": [{"type": "x/y", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
        b"[" * 5_000 + b"]" * 5_000,
    ],
    ids=["truncated", "invalid-utf8", "latin1", "nested-100000", "nested-5000"],
)
def test_a_body_that_is_not_json_is_400_malformed_json(client: TestClient, body: bytes) -> None:
    """FastAPI turns a body it cannot decode (not UTF-8) or parse (nested past the parser's
    recursion limit) into a generic 400; it is as malformed as a cut-short one."""
    response = client.post(
        "/v1/sessions/s-1/events", content=body, headers={"content-type": "application/json"}
    )
    assert_problem(response, 400, "MALFORMED_JSON")


def _append(client: TestClient, event: dict[str, Any], **body: Any) -> Any:
    return client.post("/v1/sessions/s-1/events", json={"events": [event], **body})


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None, [], {}])
def test_ignorable_is_a_json_boolean_or_the_cores_invalid_ignorable(
    client: TestClient, value: Any
) -> None:
    """Pydantic's lax mode made `"yes"` or `1` true, and so appended an unknown type as
    ignorable that the caller never marked; the contract takes only JSON booleans, and the
    core's code for anything else is INVALID_IGNORABLE (null included)."""
    event = {"type": "acme/note", "data": {}, "ignorable": value}
    body = assert_problem(_append(client, event), 422, "INVALID_IGNORABLE")
    assert "ignorable" in body["detail"]


@pytest.mark.parametrize("value", ["off", "false", "on", 0, 1, [], {}])
def test_invariants_is_a_json_boolean_or_null(client: TestClient, value: Any) -> None:
    """`"invariants": "off"` became False in lax mode: a session made without its invariants."""
    event = {"type": "turn/start", "data": {"turn": 1}}
    response = _append(client, event, invariants=value)
    body = assert_problem(response, 422, "REQUEST_INVALID")
    assert "invariants" in body["detail"]
