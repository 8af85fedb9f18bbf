"""/livez and /readyz of the writer and the projectors (servicekit.health, served beside
/metrics by servicekit.ports): the shape `dsh serve` answers too, 503 naming what fails."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from deploy.local.processes import free_ports
from servicekit.health import Health, failing
from servicekit.ports import PortInUseError, serve_http


def _get(port: int, path: str) -> tuple[int, str, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            status, media, body = response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        status, media, body = exc.code, exc.headers["Content-Type"], exc.read()
    return status, media, json.loads(body) if "json" in media else body.decode()


def test_readyz_names_each_check_and_is_503_while_one_fails() -> None:
    health = Health()
    redis_down: list[str] = []
    health.check("redis", lambda: redis_down[0] if redis_down else None)
    health.check("lag", lambda: None)
    (port,) = free_ports(1)
    server = serve_http(port, "DSH_TEST_PORT", health)
    assert server is not None
    try:
        _answers(port, redis_down)
    finally:
        server.shutdown()
        server.server_close()


def _answers(port: int, redis_down: list[str]) -> None:
    assert _get(port, "/readyz") == (
        200,
        "application/json",
        {"status": "ready", "checks": {"redis": "ok", "lag": "ok"}},
    )
    redis_down.append("[REDIS_UNREACHABLE] ConnectionError: refused")
    status, media, body = _get(port, "/readyz")
    assert (status, media) == (503, "application/problem+json")
    assert isinstance(body, dict)
    assert body["code"] == "NOT_READY" and body["status"] == 503
    assert body["detail"] == "redis: [REDIS_UNREACHABLE] ConnectionError: refused"
    assert failing(body) == {"redis": "[REDIS_UNREACHABLE] ConnectionError: refused"}
    # Prometheus is still served on the same port.
    status, _, page = _get(port, "/metrics")
    assert status == 200 and "python_info" in str(page)
    with pytest.raises(PortInUseError, match="DSH_TEST_PORT"):
        serve_http(port, "DSH_TEST_PORT", Health())


def test_a_check_that_raises_fails_with_what_it_raised() -> None:
    health = Health()

    def broken() -> str | None:
        raise TimeoutError("Timeout reading from socket")

    health.check("redis", broken)
    status, body = health.readiness()
    assert status == 503 and body["checks"] == {
        "redis": "TimeoutError: Timeout reading from socket"
    }


def test_livez_fails_once_the_loop_stops_coming_round_unless_it_is_busy() -> None:
    health = Health(stall_s=10)
    assert health.liveness()[0] == 200
    health._last_beat -= 60  # a loop that last came round a minute ago
    status, body = health.liveness()
    assert status == 503 and body["code"] == "NOT_LIVE" and "loop" in failing(body)
    with health.busy():  # a restore under way, bounded on its own
        assert health.liveness()[0] == 200
    assert health.liveness()[0] == 200  # leaving busy counts as a round
