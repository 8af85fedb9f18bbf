"""The local stack as one unit: what `dsh up`, `dsh down` and `dsh status` drive.

Kafka and Redis, and optionally the pipeline's services on them (the writer and the three
projectors, :mod:`.services`): `dsh up` starts all of it, the test fixtures only the servers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from deploy.local.kafka import KafkaCluster, ensure_kafka_jars
from deploy.local.processes import port_accepts, require_free_ports
from deploy.local.redis_server import RedisServer, ensure_redis_server
from deploy.local.services import Services
from deploy.local.settings import LocalStackSettings
from servicekit.settings import KafkaSettings
from servicekit.topics import ensure_topics


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    port: int
    healthy: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class LocalStack:
    def __init__(self, settings: LocalStackSettings | None = None, *, persistent: bool = True):
        self.settings = settings or LocalStackSettings()
        self.kafka = KafkaCluster(self.settings)
        self.redis = RedisServer(
            self.settings.state_dir / "redis", self.settings.redis_port, persistent=persistent
        )
        self.services = Services(self.settings)

    def kafka_settings(self) -> KafkaSettings:
        return KafkaSettings(bootstrap_servers=self.settings.bootstrap_servers())

    def install(self) -> None:
        """Fetch what the stack runs on (jars, redis-server); a no-op once done."""
        ensure_kafka_jars(self.settings)
        ensure_redis_server()

    def up(self, *, create_topics: bool = True, services: bool = False) -> list[ComponentStatus]:
        """Start whatever is not running and wait until all of it is healthy. Idempotent.

        ``services``: also the writer and the three projectors (they need the topics)."""
        self.install()
        # Check every port we are about to bind before starting anything, so a clash is a
        # clear error naming the port rather than a half-started stack or a hang.
        wanted: dict[int, str] = {}
        if not self.redis.process.is_running():
            wanted[self.redis.port] = "Redis"
        for node in self.kafka.nodes:
            if not node.process().is_running():
                wanted.update(
                    {
                        node.port: f"Kafka node {node.node_id} listener",
                        node.controller_port: f"Kafka node {node.node_id} controller",
                    }
                )
        if services:
            for service in self.services.all:
                if service.metrics_port and not service.process().is_running():
                    wanted[service.metrics_port] = f"{service.name} /metrics"
        require_free_ports(wanted)
        self.redis.start()
        self.kafka.start()
        self.redis.wait_ready()
        self.kafka.wait_ready()
        if create_topics or services:
            ensure_topics(self.kafka_settings(), self.settings.partitions)
        if services:
            self.services.start()
            self.services.wait_ready()
        return self.status()

    def down(self) -> int:
        """Stop everything this stack started; returns how many processes were stopped.
        Services first: stopped after Kafka they would wait for it until their timeouts."""
        return self.services.stop() + self.kafka.stop() + int(self.redis.stop())

    def status(self) -> list[ComponentStatus]:
        statuses = []
        for node in self.kafka.nodes:
            pid = node.process().pid()
            healthy = pid is not None and port_accepts(node.port)
            statuses.append(
                ComponentStatus(
                    name=f"kafka-{node.node_id}",
                    pid=pid,
                    port=node.port,
                    healthy=healthy,
                    detail="KRaft broker+controller" if pid else "not running",
                )
            )
        pid = self.redis.process.pid()
        statuses.append(
            ComponentStatus(
                name="redis",
                pid=pid,
                port=self.redis.port,
                healthy=pid is not None and self._redis_answers(),
                detail="redis-server" if pid else "not running",
            )
        )
        for service in self.services.all:
            process = service.process()
            pid = process.pid()
            if pid is None and not process.pid_file.exists():
                continue  # never started (`dsh up --no-services`): not expected to run
            statuses.append(
                ComponentStatus(
                    name=service.name,
                    pid=pid,
                    port=service.metrics_port,
                    healthy=pid is not None
                    and (service.metrics_port == 0 or port_accepts(service.metrics_port)),
                    detail=f"log {service.log_file}" if pid else f"DIED; see {service.log_file}",
                )
            )
        return statuses

    def _redis_answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.redis.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False
