"""One local stack per state dir, found from any shell: `dsh up` with other ports refuses,
a shell that exported nothing follows the running stack, and `dsh status` tells the truth
about services that stopped, died or cannot reach Redis (issue 25)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.local.processes import free_ports, port_is_free
from tests.support.probes import probe
from tests.support.processes import free_port_run, run_dsh
from tests.support.waiting import wait_for

FORMATS = Path(__file__).resolve().parents[1] / "unit" / "data" / "formats"


def _dsh(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_dsh(env, *args, timeout=timeout)


def _bare_env(state_dir: Path) -> dict[str, str]:
    """A new shell: nothing of the pipeline exported but where the state is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    return {**env, "DSH_LOCAL_STATE_DIR": str(state_dir)}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A whole stack (Kafka, Redis, writer, projectors) started on ports of its own; yields
    the environment it was started with."""
    state_dir = tmp_path_factory.mktemp("identity") / "state"
    kafka_port, controller_port, redis_port = free_ports(3)
    env = {
        **_bare_env(state_dir),
        "DSH_LOCAL_KAFKA_PORT": str(kafka_port),
        "DSH_LOCAL_CONTROLLER_PORT": str(controller_port),
        "DSH_LOCAL_REDIS_PORT": str(redis_port),
        "DSH_LOCAL_PARTITIONS": "2",
        "DSH_LOCAL_METRICS_PORT": str(free_port_run(4)),
    }
    try:
        up = _dsh(env, "up", "--json")
        assert up.returncode == 0, up.stderr
        yield env
    finally:
        _dsh(_bare_env(state_dir), "down")


def _status(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    result = _dsh(env, "status", "--json", timeout=60)
    return {c["name"]: c for c in json.loads(result.stdout)["components"]}


def test_up_with_other_ports_refuses_naming_the_running_stack(stack: dict[str, str]) -> None:
    state_dir = Path(stack["DSH_LOCAL_STATE_DIR"])
    before = _status(stack)
    redis_pid_file = (state_dir / "redis" / "redis.pid").read_text()
    other = free_ports(4)
    names = ("KAFKA", "CONTROLLER", "REDIS", "METRICS")
    moved = {**stack, **{f"DSH_LOCAL_{n}_PORT": str(p) for n, p in zip(names, other, strict=True)}}
    result = _dsh(moved, "up", timeout=60)  # refused at once: nothing is waited for
    assert result.returncode == 1
    assert "[STACK_RUNNING]" in result.stderr and str(state_dir) in result.stderr
    assert f"127.0.0.1:{stack['DSH_LOCAL_KAFKA_PORT']}" in result.stderr
    assert f"127.0.0.1:{stack['DSH_LOCAL_REDIS_PORT']}" in result.stderr
    assert "Traceback" not in result.stderr
    # Nothing second was started, nothing of the running stack was touched.
    assert (state_dir / "redis" / "redis.pid").read_text() == redis_pid_file
    assert all(port_is_free(p) for p in other)
    after = _status(stack)
    assert {n: c["pid"] for n, c in after.items()} == {n: c["pid"] for n, c in before.items()}

    # Only a port changed, one at a time, is refused just the same.
    one = _dsh({**stack, "DSH_LOCAL_REDIS_PORT": str(other[2])}, "up", timeout=60)
    assert one.returncode == 1 and "[STACK_RUNNING]" in one.stderr


def test_a_new_shell_follows_the_running_stack(stack: dict[str, str], tmp_path: Path) -> None:
    bare = _bare_env(Path(stack["DSH_LOCAL_STATE_DIR"]))
    status = _dsh(bare, "status", "--json", timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    components = json.loads(status.stdout)["components"]
    assert all(c["healthy"] for c in components), components
    assert {c["name"]: c["port"] for c in components}["redis"] == int(stack["DSH_LOCAL_REDIS_PORT"])

    # `dsh up` from there is the same stack: nothing refused, nothing restarted.
    again = _dsh(bare, "up", "--json")
    assert again.returncode == 0, again.stderr

    imported = _dsh(bare, "import", str(FORMATS / "v0_legacy.jsonl"), "--session-id", "follow")
    assert imported.returncode == 0, imported.stderr
    wait_for(
        lambda: _dsh(bare, "verify", "follow", timeout=60).returncode == 0,
        60,
        "the projectors to catch up with the import",
    )
    shown = _dsh(bare, "show", "transcript", "follow", "--json", timeout=60)
    assert shown.returncode == 0, shown.stderr
    exported = _dsh(bare, "export", str(tmp_path / "avro"), "--json", timeout=60)
    assert exported.returncode == 0 and json.loads(exported.stdout)["records"] > 0
    replayed = _dsh(bare, "replay", "follow", "--json", timeout=120)
    assert replayed.returncode == 0, replayed.stderr
    assert "note:" not in imported.stderr + shown.stderr  # no fallback to default ports

    # What the environment names explicitly still wins.
    (dead,) = free_ports(1)
    explicit = _dsh(
        {**bare, "DSH_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{dead}"},
        "verify",
        "follow",
        "--timeout",
        "2",
        timeout=60,
    )
    assert explicit.returncode == 1 and "[KAFKA_UNREACHABLE]" in explicit.stderr
    assert f"127.0.0.1:{dead}" in explicit.stderr


def test_a_projector_that_cannot_reach_redis_is_not_ready_until_redis_is_back(
    stack: dict[str, str],
) -> None:
    before = _status(stack)
    surface = before["project-surface"]["port"]
    assert probe(surface, "/readyz") == (
        200,
        {"status": "ready", "checks": {"redis": "ok", "lag": "ok"}},
    )
    os.kill(before["redis"]["pid"], signal.SIGKILL)  # a crash: the projectors' calls are refused
    try:
        wait_for(lambda: probe(surface, "/readyz")[0] == 503, 30, "the surface projector's 503")
        status, body = probe(surface, "/readyz")
        assert (status, body["code"]) == (503, "NOT_READY"), body
        assert body["checks"]["redis"].startswith("[REDIS_UNREACHABLE]"), body
        assert body["detail"].startswith("redis: [REDIS_UNREACHABLE]")
        assert probe(surface, "/livez")[0] == 200  # waiting for Redis: a restart would not help
        projectors = [c for n, c in _status(stack).items() if n.startswith("project-")]
        assert all(c["state"] == "not ready" and not c["healthy"] for c in projectors)
        table = _dsh(stack, "status", timeout=60)
        assert table.returncode == 1 and "NOT READY: redis: [REDIS_UNREACHABLE]" in table.stdout
    finally:
        restarted = _dsh(stack, "up")
        assert restarted.returncode == 0, restarted.stderr
    wait_for(lambda: probe(surface, "/readyz")[0] == 200, 60, "the projector ready again")
    wait_for(lambda: all(c["healthy"] for c in _status(stack).values()), 30, "a healthy stack")


def test_status_tells_a_stopped_service_from_a_dead_one(stack: dict[str, str]) -> None:
    components = _status(stack)
    writer, audit = components["writer"]["pid"], components["project-audit"]["pid"]
    os.kill(writer, signal.SIGTERM)
    os.kill(audit, signal.SIGKILL)
    try:
        wait_for(
            lambda: (
                _status(stack)["writer"]["pid"] is None
                and _status(stack)["project-audit"]["pid"] is None
            ),
            60,
            "the writer to stop and the audit projector to die",
        )
        after = _status(stack)
        assert after["writer"]["state"] == "stopped", after["writer"]
        assert after["project-audit"]["state"] == "DOWN", after["project-audit"]
        assert "DIED" in after["project-audit"]["detail"]
        table = _dsh(stack, "status", timeout=60).stdout
        assert "stopped" in table and "DIED" in table
    finally:
        restarted = _dsh(stack, "up")
        assert restarted.returncode == 0, restarted.stderr
    # A restarted service is ready once it has restored its partitions (and caught up).
    wait_for(
        lambda: all(c["state"] == "healthy" for c in _status(stack).values()),
        60,
        "every service ready again after dsh up",
    )


# (arguments, exit status, error code in stderr): every command's error paths, run from a
# shell that exported nothing but the state dir, against the stack on its own ports.
MATRIX: list[tuple[tuple[str, ...], int, str]] = [
    (("show", "surface", "nope-xyz"), 1, "[SESSION_UNKNOWN]"),
    (("show", "transcript", "nope-xyz"), 1, "[SESSION_UNKNOWN]"),
    (("show", "audit", "nope-xyz", "--json"), 1, "[SESSION_UNKNOWN]"),
    (("verify", "nope-xyz"), 1, "[SESSION_UNKNOWN]"),
    (("verify", "nope-xyz", "--timeout", "-1"), 2, "argument --timeout"),
    (("import", "/nonexistent/file.jsonl"), 1, "[FILE_NOT_FOUND]"),
    (("import", str(FORMATS / "v0_legacy.jsonl"), "--timeout", "0"), 2, "argument --timeout"),
    (("export", "/proc/version"), 1, "[EXPORT_DIR_INVALID]"),
    (("replay", "--projection", "sideways"), 2, "argument --projection"),
    (("tail", "nope-xyz", "-n", "-5"), 2, "argument -n/--lines"),
    (("show", "nope", "s"), 2, "argument projection"),
    (("settings", "--bogus"), 2, "--bogus"),
    (("status",), 0, ""),
]


@pytest.mark.parametrize(("args", "status", "code"), MATRIX, ids=[" ".join(m[0]) for m in MATRIX])
def test_every_command_fails_with_its_code_from_a_bare_shell(
    stack: dict[str, str], args: tuple[str, ...], status: int, code: str
) -> None:
    result = _dsh(_bare_env(Path(stack["DSH_LOCAL_STATE_DIR"])), *args, timeout=60)
    assert result.returncode == status, result.stdout + result.stderr
    if code:
        assert code in result.stderr, result.stderr
    else:
        assert "error" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
