"""A Redis primary, a replica and a Sentinel watching them, on loopback (tests; a local try of
``DSH_REDIS_SENTINELS``). The Sentinel alone forms the quorum and takes ``down_after_ms`` (a
second by default) to call the primary down, so a test's failover happens within seconds of the
primary's loss."""

from __future__ import annotations

import time
from pathlib import Path

from deploy.local.processes import ManagedProcess
from deploy.local.redis_server import RedisServer, ensure_redis_server

MASTER_NAME = "dsh"


class LocalRedisSentinel:
    def __init__(
        self,
        home: Path,
        primary_port: int,
        replica_port: int,
        sentinel_port: int,
        down_after_ms: int = 1000,
    ):
        self.home = home
        self.sentinel_port = sentinel_port
        # Also how long a replica may have been cut off from the primary and still be
        # promoted: ten times this, plus the time the primary has been down.
        self.down_after_ms = down_after_ms
        self.servers = [
            RedisServer(home / "a", primary_port, persistent=False),
            RedisServer(home / "b", replica_port, persistent=False, replica_of=primary_port),
        ]
        self.sentinel = ManagedProcess(
            f"redis sentinel (port {sentinel_port})",
            home / "sentinel.pid",
            home / "sentinel.log",
            f"127.0.0.1:{sentinel_port}",
        )

    @property
    def sentinels(self) -> str:
        """``DSH_REDIS_SENTINELS``."""
        return f"127.0.0.1:{self.sentinel_port}"

    def start(self, timeout_s: float = 30.0) -> None:
        for server in self.servers:
            server.start()
            server.wait_ready(timeout_s)
        primary = self.servers[0].port
        conf = self.home / "sentinel.conf"
        # Sentinel rewrites its own file as it learns the replicas and after a failover.
        conf.write_text(
            "\n".join(
                [
                    f"port {self.sentinel_port}",
                    "bind 127.0.0.1",
                    "daemonize no",
                    f"dir {self.home}",
                    f"sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 1",
                    f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}",
                    f"sentinel failover-timeout {MASTER_NAME} 10000",
                ]
            )
            + "\n"
        )
        self.sentinel.start([ensure_redis_server(), str(conf), "--sentinel"])
        self.wait_replica_known(timeout_s)

    def primary_port(self) -> int:
        """The port of the server the Sentinel names primary now."""
        import redis

        with redis.Redis(port=self.sentinel_port, socket_timeout=2) as client:
            _, port = client.execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        return int(port)

    def wait_replica_known(self, timeout_s: float) -> None:
        """Until the Sentinel knows the replica, there is nothing for it to promote."""
        import redis

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with redis.Redis(port=self.sentinel_port, socket_timeout=2) as client:
                    if client.execute_command("SENTINEL REPLICAS", MASTER_NAME):
                        return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise self.sentinel.fail("never learnt of the replica")
            time.sleep(0.2)

    def stop(self) -> None:
        self.sentinel.stop(timeout_s=10)
        for server in self.servers:
            server.stop()
