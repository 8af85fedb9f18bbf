"""The local stack as one unit: what `dsh up`, `dsh down` and `dsh status` drive.

Kafka and Redis, and optionally the pipeline's services on them (the writer and the three
projectors, :mod:`.services`): `dsh up` starts all of it, the test fixtures only the servers.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from deploy.local.errors import StackRunningError
from deploy.local.kafka import KafkaCluster, ensure_kafka_jars
from deploy.local.processes import port_accepts, require_free_ports
from deploy.local.record import describe, identity, read_record, remove_record, write_record
from deploy.local.redis_server import RedisServer, ensure_redis_server
from deploy.local.services import Service, Services, probe
from deploy.local.settings import LocalStackSettings
from servicekit.health import exited_cleanly, failing
from servicekit.settings import KafkaSettings
from servicekit.topics import ensure_topics

# How long `dsh up` waits, after every service passed its checks once, for all of them at once.
SETTLE_S = 30.0


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    port: int
    healthy: bool
    detail: str
    # What `dsh status` prints in its health column: "healthy" or "DOWN" when empty; a
    # service can also be "stopped" (a clean exit), "not ready" (its /readyz fails: a
    # dependency is missing, a restore or a catch-up is under way) or "not live" (its /livez).
    state: str = ""

    def __post_init__(self) -> None:
        if not self.state:
            object.__setattr__(self, "state", "healthy" if self.healthy else "DOWN")

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
        self._refuse_another_stack()
        require_free_ports(self._ports_to_bind(services))
        # Recorded before anything starts: a stack that fails half-way is still found (and
        # stopped) by `dsh down` and `dsh status` from any shell.
        write_record(self.settings)
        self.redis.start()
        self.kafka.start()
        self.redis.wait_ready()
        self.kafka.wait_ready()
        if create_topics or services:
            ensure_topics(self.kafka_settings(), self.settings.partitions)
        if services:
            self.services.start()
            self.services.wait_ready()
        return self._settled_status()

    def _settled_status(self, timeout_s: float = SETTLE_S) -> list[ComponentStatus]:
        """The status once every component is healthy, or as it is after ``timeout_s``: a
        service that passed its checks once may fail one again while its group settles (a
        rebalance as the next one joins), and `dsh up` reports what it waited for."""
        deadline = time.monotonic() + timeout_s
        while True:
            statuses = self.status()
            if all(s.healthy for s in statuses) or time.monotonic() > deadline:
                return statuses
            time.sleep(0.25)

    def _refuse_another_stack(self) -> None:
        """The state dir holds one stack: started again with other ports, it would run a second
        Redis and Kafka on the same data and pid files."""
        record = read_record(self.settings.state_dir)
        if record is None:
            return
        recorded = {k: record.get(k) for k in identity(self.settings)}
        if recorded == identity(self.settings):
            return
        running = LocalStack(self.settings.model_copy(update=recorded)).running()
        if running:
            raise StackRunningError(
                f"a stack is already running in {self.settings.state_dir} ({', '.join(running)}) "
                f"on other ports: {describe(record)}; `dsh down` stops it, or start a second "
                "stack with another DSH_LOCAL_STATE_DIR"
            )

    def _ports_to_bind(self, services: bool) -> dict[int, tuple[str, str]]:
        """Every port we are about to bind, checked before anything starts, so a clash is a
        clear error naming the port and its setting rather than a half-started stack."""
        wanted: dict[int, tuple[str, str]] = {}
        if not self.redis.process.is_running():
            wanted[self.redis.port] = ("Redis", "DSH_LOCAL_REDIS_PORT")
        for node in self.kafka.nodes:
            if not node.process().is_running():
                n = node.node_id
                wanted[node.port] = (f"Kafka node {n} listener", "DSH_LOCAL_KAFKA_PORT")
                wanted[node.controller_port] = (
                    f"Kafka node {n} controller",
                    "DSH_LOCAL_CONTROLLER_PORT",
                )
        if services:
            for service in self.services.all:
                if service.metrics_port and not service.process().is_running():
                    wanted[service.metrics_port] = (
                        f"{service.name} /metrics",
                        "DSH_LOCAL_METRICS_PORT",
                    )
        return wanted

    def running(self) -> list[str]:
        """The names of this stack's processes that run."""
        names = [f"kafka-{n.node_id}" for n in self.kafka.nodes if n.process().is_running()]
        if self.redis.process.is_running():
            names.append("redis")
        return names + [s.name for s in self.services.all if s.process().is_running()]

    def down(self) -> int:
        """Stop everything this stack started; returns how many processes were stopped.
        Services first: stopped after Kafka they would wait for it until their timeouts."""
        stopped = self.services.stop() + self.kafka.stop() + int(self.redis.stop())
        remove_record(self.settings.state_dir)
        return stopped

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
        statuses += [
            self._service_status(s) for s in self.services.all if s.process().pid_file.exists()
        ]
        return statuses

    def _service_status(self, service: Service) -> ComponentStatus:
        """Running, with its ``/livez`` and ``/readyz`` passing (not ready: each failing check
        and why); a service gone after a clean stop (SIGTERM) is stopped, any other gone one
        died."""
        pid = service.process().pid()
        port = service.metrics_port
        healthy, detail, state = pid is not None, f"log {service.log_file}", ""
        if pid is None:
            if exited_cleanly(service.exit_file):
                state, detail = "stopped", "stopped cleanly (SIGTERM); `dsh up` starts it again"
            else:
                detail = f"DIED; see {service.log_file}"
        elif service.metrics_port:
            for path, verdict in (("/livez", "not live"), ("/readyz", "not ready")):
                answer = probe(f"http://127.0.0.1:{port}{path}")
                if answer is None:
                    healthy, detail = False, f"{path} on port {port} does not answer"
                elif failed := failing(answer):
                    healthy, state = False, verdict
                    detail = f"{verdict.upper()}: " + "; ".join(
                        f"{name}: {_short(why)}" for name, why in failed.items()
                    )
                else:
                    continue
                detail += f"; see {service.log_file}"
                break
        return ComponentStatus(service.name, pid, port, healthy, detail, state)

    def _redis_answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.redis.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False


def _short(why: str, most: int = 160) -> str:
    """A check's reason as one line of a status table (the whole of it is in the log)."""
    line = " ".join(why.split())
    return line if len(line) <= most else line[: most - 1] + "…"
