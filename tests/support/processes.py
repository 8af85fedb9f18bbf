"""``python -m cli ARGS`` as a process of its own, as a supervisor would run a service: its own
environment and log file; signals, SIGKILL and reaping for the crash tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class CliProcess:
    def __init__(self, args: list[str], env: Mapping[str, str], log_path: Path) -> None:
        """``env`` is the whole environment of the process."""
        self.args = args
        self.env = dict(env)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()  # a test and a supervisor thread may both start it
        self.start()

    def start(self) -> None:
        with self.lock, self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli", *self.args],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as a crash would, and reap it."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout_s)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stopped(self) -> bool:
        """True while the process is SIGSTOPped (state T in /proc)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def owned(self) -> list[int] | None:
        """A writer's or projector's partitions, from its last "; owning [..]" line (None
        before any)."""
        owned = None
        for line in self.log().splitlines():
            if "; owning [" in line:
                inside = line.rsplit("; owning [", 1)[1].split("]", 1)[0]
                owned = [int(p) for p in inside.split(",") if p.strip()]
        return owned

    def close(self) -> None:
        """Gone, whatever state it is in (a stopped process gets SIGCONT first)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)


def service_env(
    kafka: Any, *, clear: tuple[str, ...] = ("DSH_",), **settings: str
) -> dict[str, str]:
    """This process's environment without ``clear``'s variables, pointed at ``kafka`` (its
    servers and topic prefix), plus ``settings`` (full variable names)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(clear)}
    env["DSH_KAFKA_BOOTSTRAP_SERVERS"] = kafka.bootstrap_servers
    env["DSH_KAFKA_TOPIC_PREFIX"] = kafka.topic_prefix
    return env | settings


def run_dsh(
    env: Mapping[str, str] | None, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``dsh ARGS`` run to its end in ``env`` (None: this process's), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free ports (the services' /metrics ports)."""
    from deploy.local.processes import free_port_block

    return free_port_block(count)
