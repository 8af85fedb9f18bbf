"""A service whose port is taken fails with PORT_IN_USE naming the setting, at once and
without a traceback (issue 25)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from servicekit.settings import KafkaSettings
from tests.conftest import Servers
from tests.support.processes import service_env


@pytest.mark.parametrize(
    ("argv", "setting"),
    [
        (("writer",), "DSH_WRITER_METRICS_PORT"),
        (("project", "surface"), "DSH_PROJECTOR_METRICS_PORT"),
    ],
)
def test_a_service_with_its_metrics_port_taken_names_the_setting(
    topics: KafkaSettings, servers: Servers, argv: tuple[str, ...], setting: str
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        env = service_env(topics) | {setting: str(port), "DSH_REDIS_URL": servers.redis_url}
        result = subprocess.run(
            [sys.executable, "-m", "cli", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1, result.stderr
    assert "[PORT_IN_USE]" in result.stderr and setting in result.stderr
    assert f"port {port}" in result.stderr
    assert "Traceback" not in result.stderr
