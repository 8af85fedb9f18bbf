"""`dsh up` / `dsh status` / `dsh down` drive real processes, and fail clearly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.processes import free_ports
from tests.support.processes import free_port_run, run_dsh

SERVICES = {"writer", "project-surface", "project-transcript", "project-audit"}


def _dsh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_dsh(env, *args, timeout=180)


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
        "DSH_LOCAL_METRICS_PORT": str(free_port_run(4)),
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


def test_up_twice_is_harmless_demo_runs_and_down_leaves_no_processes(
    stack_env: dict[str, str],
) -> None:
    servers_only = _dsh(stack_env, "up", "--no-services", "--json")
    assert servers_only.returncode == 0, servers_only.stderr
    servers = {c["name"]: c["pid"] for c in json.loads(servers_only.stdout)["components"]}
    assert set(servers) == {"kafka-1", "redis"}

    # Then the whole stack: the servers already running are kept, the services added.
    first = _dsh(stack_env, "up", "--json")
    assert first.returncode == 0, first.stderr
    status = json.loads(first.stdout)
    assert status["healthy"] is True
    pids = {c["name"]: c["pid"] for c in status["components"]}
    assert set(pids) == {"kafka-1", "redis", *SERVICES}
    assert {name: pids[name] for name in servers} == servers
    assert all(_pid_alive(pid) for pid in pids.values())
    # The servers are real: a JVM running Kafka's main class, and redis-server; the services
    # are `dsh writer` and `dsh project NAME` processes.
    kafka_cmd = Path(f"/proc/{pids['kafka-1']}/cmdline").read_bytes().split(b"\0")
    assert kafka_cmd[0].endswith(b"java") and b"kafka.Kafka" in kafka_cmd
    assert b"redis-server" in Path(f"/proc/{pids['redis']}/cmdline").read_bytes()
    assert b"writer" in Path(f"/proc/{pids['writer']}/cmdline").read_bytes().split(b"\0")

    second = _dsh(stack_env, "up", "--json")
    assert second.returncode == 0, second.stderr
    assert {c["name"]: c["pid"] for c in json.loads(second.stdout)["components"]} == pids

    # `dsh demo` on the running stack: the real processes validate, commit and project it.
    demo = _dsh(stack_env, "demo", "--json")
    assert demo.returncode == 0, demo.stderr
    run = json.loads(demo.stdout)
    assert len(run["surface"]["messages"]) == 8
    assert len(run["summary"]["replaced"]) == 38
    assert sum(e["type"] == "turn/start" for e in run["transcript"]) == 12
    assert set(run["metrics"]) == SERVICES and set(run["logs"]) >= SERVICES
    port, redis_port = stack_env["DSH_LOCAL_KAFKA_PORT"], stack_env["DSH_LOCAL_REDIS_PORT"]
    clients = {
        "DSH_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
        "DSH_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
    }
    verify = _dsh({**stack_env, **clients}, "verify", run["session"])
    assert verify.returncode == 0, verify.stderr

    down = _dsh(stack_env, "down")
    assert down.returncode == 0 and "stopped 6" in down.stdout
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
    assert "DSH_LOCAL_KAFKA_PORT" in result.stderr
    # Nothing was started half-way.
    status = _dsh(stack_env, "status", "--json")
    assert all(c["pid"] is None for c in json.loads(status.stdout)["components"])


def test_unknown_setting_is_refused(stack_env: dict[str, str]) -> None:
    result = _dsh({**stack_env, "DSH_LOCAL_KAFKA_PROT": "1"}, "status")
    assert result.returncode == 1
    assert "DSH_LOCAL_KAFKA_PROT" in result.stderr


def test_a_cluster_id_starting_with_a_dash_still_formats(tmp_path: Path) -> None:
    # One random id in 64 starts with "-"; the storage tool once took it for an option and
    # failed to format (seen in CI). State dirs from then may still hold such an id.
    from deploy.local.kafka import KafkaCluster
    from deploy.local.settings import LocalStackSettings

    kafka_port, controller_port, redis_port = free_ports(3)
    settings = LocalStackSettings(
        state_dir=tmp_path / "state",
        kafka_port=kafka_port,
        controller_port=controller_port,
        redis_port=redis_port,
    )
    cluster = KafkaCluster(settings)
    cluster.home.mkdir(parents=True)
    (cluster.home / "cluster.id").write_text("-yFwc_YpRU6BnFy3d1_HLw\n")
    try:
        cluster.start()
        cluster.wait_ready()
        meta = (cluster.nodes[0].data_dir / "meta.properties").read_text()
        assert "cluster.id=-yFwc_YpRU6BnFy3d1_HLw" in meta.splitlines()
    finally:
        cluster.stop()
    assert not cluster.running_nodes()
