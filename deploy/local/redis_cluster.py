"""A Redis Cluster of a few primaries on loopback (tests; a local try of ``DSH_REDIS_CLUSTER``).

Each node is a :class:`RedisServer` with ``cluster-enabled yes`` in a data dir of its own; the
slots are spread over them by ``redis-cli --cluster create`` (Debian's redis-tools, installed
with redis-server). No replicas: a node's loss is a loss, which is what the tests want.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from deploy.local.errors import LocalStackError
from deploy.local.redis_server import RedisServer, ensure_redis_server


class LocalRedisCluster:
    def __init__(self, home: Path, ports: Sequence[int], bus_ports: Sequence[int]) -> None:
        """``ports`` for clients, ``bus_ports`` for the nodes' cluster bus (by default Redis
        uses port + 10000, which may be taken or past 65535)."""
        if len(ports) < 3 or len(bus_ports) != len(ports):
            raise LocalStackError(
                "a Redis Cluster needs at least 3 primaries, each with a bus port",
                code="BAD_CLUSTER",
            )
        self.nodes = [
            RedisServer(home / f"node-{port}", port, persistent=False, cluster_port=bus)
            for port, bus in zip(ports, bus_ports, strict=True)
        ]

    @property
    def url(self) -> str:
        """A seed node: ``DSH_REDIS_URL`` with ``DSH_REDIS_CLUSTER=true``."""
        return self.nodes[0].url

    def start(self, timeout_s: float = 60.0) -> None:
        for node in self.nodes:
            node.start()
        for node in self.nodes:
            node.wait_ready(timeout_s)
        if not self._formed():
            self._create()
        self.wait_ready(timeout_s)

    def _create(self) -> None:
        ensure_redis_server()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise LocalStackError(
                "redis-cli is missing; install Debian's redis-tools", code="TOOL_MISSING"
            )
        argv = [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes)]
        result = subprocess.run(
            [*argv, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            raise LocalStackError(
                f"`{' '.join(argv)}` failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}",
                code="CLUSTER_CREATE_FAILED",
            )

    def _info(self, node: RedisServer) -> dict[str, str]:
        import redis

        with redis.Redis(port=node.port, socket_timeout=2) as client:
            raw = client.execute_command("CLUSTER INFO")  # parsed by redis-py into a dict
        if isinstance(raw, dict):
            return {_text(k): _text(v) for k, v in raw.items()}
        return dict(line.split(":", 1) for line in _text(raw).split() if ":" in line)

    def _formed(self) -> bool:
        return all(self._info(n).get("cluster_known_nodes") != "1" for n in self.nodes)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every node sees every other and all 16384 slots served (``cluster_state:ok``)."""
        deadline = time.monotonic() + timeout_s
        want = str(len(self.nodes))
        while True:
            infos = [self._info(n) for n in self.nodes]
            if all(
                i.get("cluster_state") == "ok"
                and i.get("cluster_known_nodes") == want
                and i.get("cluster_slots_ok") == "16384"
                for i in infos
            ):
                return
            if time.monotonic() > deadline:
                raise LocalStackError(
                    f"the Redis Cluster did not form in {timeout_s}s: {infos}",
                    code="CLUSTER_NOT_READY",
                )
            time.sleep(0.1)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
