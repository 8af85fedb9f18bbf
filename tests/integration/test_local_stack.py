"""`dsh up` / `dsh status` / `dsh down` drive real processes, and fail clearly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.processes import free_ports


def _dsh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture
def stack_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    kafka_port, controller_port, redis_port = free_ports(3)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DSH_LOCAL_")},
        "DSH_LOCAL_STATE_DIR": str(tmp_path / "state"),
        "DSH_LOCAL_KAFKA_PORT": str(kafka_port),
        "DSH_LOCAL_CONTROLLER_PORT": str(controller_port),
        "DSH_LOCAL_REDIS_PORT": str(redis_port),
        "DSH_LOCAL_PARTITIONS": "2",
    }
    try:
        yield env
    finally:
        _dsh(env, "down")


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def test_up_twice_is_harmless_and_down_leaves_no_processes(stack_env: dict[str, str]) -> None:
    first = _dsh(stack_env, "up", "--json")
    assert first.returncode == 0, first.stderr
    status = json.loads(first.stdout)
    assert status["healthy"] is True
    pids = {c["name"]: c["pid"] for c in status["components"]}
    assert set(pids) == {"kafka-1", "redis"}
    assert all(_pid_alive(pid) for pid in pids.values())
    # The servers are real: a JVM running Kafka's main class, and redis-server.
    kafka_cmd = Path(f"/proc/{pids['kafka-1']}/cmdline").read_bytes().split(b"\0")
    assert kafka_cmd[0].endswith(b"java") and b"kafka.Kafka" in kafka_cmd
    assert b"redis-server" in Path(f"/proc/{pids['redis']}/cmdline").read_bytes()

    second = _dsh(stack_env, "up", "--json")
    assert second.returncode == 0, second.stderr
    assert {c["name"]: c["pid"] for c in json.loads(second.stdout)["components"]} == pids

    down = _dsh(stack_env, "down")
    assert down.returncode == 0 and "stopped 2" in down.stdout
    assert not any(_pid_alive(pid) for pid in pids.values())

    after = _dsh(stack_env, "status", "--json")
    assert after.returncode == 1  # not healthy: nothing runs
    assert all(c["pid"] is None for c in json.loads(after.stdout)["components"])


def test_a_taken_port_is_a_clear_error_naming_it(stack_env: dict[str, str]) -> None:
    port = int(stack_env["DSH_LOCAL_KAFKA_PORT"])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = _dsh(stack_env, "up")
    assert result.returncode == 1
    assert f"port {port}" in result.stderr and "PORT_IN_USE" in result.stderr
    # Nothing was started half-way.
    status = _dsh(stack_env, "status", "--json")
    assert all(c["pid"] is None for c in json.loads(status.stdout)["components"])


def test_unknown_setting_is_refused(stack_env: dict[str, str]) -> None:
    result = _dsh({**stack_env, "DSH_LOCAL_KAFKA_PROT": "1"}, "status")
    assert result.returncode == 1
    assert "DSH_LOCAL_KAFKA_PROT" in result.stderr
