"""A real Redis server (Debian's ``redis-server``) on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from deploy.local.errors import LocalStackError
from deploy.local.processes import ManagedProcess


def ensure_redis_server() -> str:
    """The redis-server binary, installed from Debian's packages when missing and we are root."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise LocalStackError(
            "redis-server is not installed; install Debian's package: apt-get install redis-server",
            code="TOOL_MISSING",
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "redis-server"]):
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise LocalStackError(
                f"`{' '.join(argv)}` failed:\n{result.stderr[-2000:]}", code="INSTALL_FAILED"
            )
    found = shutil.which("redis-server")
    if not found:
        raise LocalStackError(
            "redis-server still missing after apt-get install", code="TOOL_MISSING"
        )
    return found


class RedisServer:
    def __init__(
        self,
        home: Path,
        port: int,
        *,
        persistent: bool = True,
        password: str | None = None,
        cluster_port: int | None = None,
        replica_of: int | None = None,
    ) -> None:
        self.home = home
        self.port = port
        self.persistent = persistent
        self.password = password
        # A node of a Redis Cluster (see .redis_cluster), its bus on this port.
        self.cluster_port = cluster_port
        # A replica of the loopback server on this port (see .redis_sentinel).
        self.replica_of = replica_of
        # redis-server rewrites its process title to "redis-server 127.0.0.1:PORT".
        self.process = ManagedProcess(
            f"redis (port {port})", home / "redis.pid", home / "redis.log", f"127.0.0.1:{port}"
        )

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.process.is_running():
            return
        binary = ensure_redis_server()
        self.home.mkdir(parents=True, exist_ok=True)
        config = [
            f"port {self.port}",
            "bind 127.0.0.1",
            "protected-mode yes",
            f"dir {self.home}",
            "daemonize no",
            'save ""',
            # The read models are rebuildable from Kafka, but a development restart should not
            # force a replay, so the local stack keeps an append-only file; tests do not.
            f"appendonly {'yes' if self.persistent else 'no'}",
            "appendfsync everysec",
        ]
        if self.password is not None:
            config.append(f"requirepass {self.password}")
        if self.cluster_port is not None:
            config += [
                "cluster-enabled yes",
                f"cluster-port {self.cluster_port}",
                f"cluster-config-file {self.home / 'nodes.conf'}",
                "cluster-node-timeout 2000",
            ]
        if self.replica_of is not None:
            config.append(f"replicaof 127.0.0.1 {self.replica_of}")
        conf = self.home / "redis.conf"
        conf.write_text("\n".join(config) + "\n")
        conf.chmod(0o600)  # may hold the password
        self.process.start([binary, str(conf)])

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        import redis

        client = redis.Redis(port=self.port, password=self.password, socket_timeout=1)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if client.ping():
                    return
            except redis.RedisError as exc:
                last: Exception = exc
            if not self.process.is_running():
                raise self.process.fail("exited during start-up")
            if time.monotonic() > deadline:
                raise self.process.fail(f"did not answer PING in time ({last})")
            time.sleep(0.1)

    def stop(self) -> bool:
        return self.process.stop(timeout_s=15)
