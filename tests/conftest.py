"""Fixtures shared by every test: real Kafka and Redis, started once per test session.

The broker and Redis run on free loopback ports with private data dirs under pytest's temp
folder, and are stopped at the end. To reuse servers you already run (faster iteration), set
``DSH_TEST_BOOTSTRAP`` and ``DSH_TEST_REDIS_URL``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from deploy.local.kafka import SHORT_LIVED_JVM
from deploy.local.processes import LISTEN_PORTS_VARIABLE, listen_port_range, worker_slice

if TYPE_CHECKING:
    import redis

    from servicekit.settings import KafkaSettings

INTEGRATION_DIR = os.path.join(os.path.dirname(__file__), "integration")
TEST_PARTITIONS = 4

# The suite starts dozens of brokers, each for minutes, and on two cores CPU is what it waits
# for: short-lived JVM options start one in a third less CPU and idle it in a fifth less
# (`python -m bench.broker_start`). Set the variable to test with the brokers' default options.
os.environ.setdefault("DSH_LOCAL_KAFKA_JVM_OPTIONS", " ".join(SHORT_LIVED_JVM))


def _own_listen_ports() -> None:
    """Each xdist worker picks its servers' ports from a slice of its own: two workers
    starting clusters at once never pick the same port in the seconds before it is bound."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker.startswith("gw") or not count:
        return
    share = worker_slice(*listen_port_range(), int(worker.removeprefix("gw")), int(count))
    if share is not None:
        os.environ[LISTEN_PORTS_VARIABLE] = "{}-{}".format(*share)


_own_listen_ports()


NETWORK_FAULTS = "tests/reliability/test_network_faults.py"
# Modules of minutes, handed out first among the modules so that none starts last.
LONG_MODULES = (
    "tests/integration/test_docs.py",
    "tests/integration/test_http_api.py",
    "tests/integration/test_inspector.py",
    "tests/integration/test_cli.py",
)


def _unit_of_work(nodeid: str) -> str:
    """What one worker runs whole: the reliability suite (its 3-broker cluster starts once),
    the network faults (a proxied cluster of their own), else a test module."""
    if nodeid.startswith(NETWORK_FAULTS):
        return "network faults"
    if nodeid.startswith("tests/reliability/"):
        return "reliability"
    return nodeid.split("::", 1)[0]


def _start_order(item: pytest.Item) -> int:
    unit = _unit_of_work(item.nodeid)
    if unit == "reliability":
        return 0
    if unit == "network faults":
        return 1
    if unit in LONG_MODULES:
        return 2
    return 4 if unit.startswith("tests/unit/") else 3


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if str(item.fspath).startswith(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)
    items.sort(key=_start_order)  # stable: each module keeps its own order


# First, ahead of xdist's own (this hook takes the first answer).
@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test` runs three pytest-xdist workers on units of work (``_unit_of_work``),
    handed out in the order ``pytest_collection_modifyitems`` sorts them to: the reliability
    suite (the longest, several minutes on one cluster) and the network faults start at once on
    two workers, the third takes the test modules one at a time, longest first, and the other
    two join it as they finish. The units mostly wait on brokers and timeouts, so they overlap
    on two cores.

    xdist's ``loadgroup`` would do it with marks, but it renames test ids through
    ``item._nodeid``, which pytest 9.2 no longer reads; its ``loadscope`` scheduler does the
    same through ``_split_scope`` (private, hence the version pin), without its reordering by
    size (which would start the reliability suite last)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class Units(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of_work(nodeid)

    return Units(config, log)


@dataclass(frozen=True)
class Servers:
    bootstrap_servers: str
    redis_url: str


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    bootstrap = os.environ.get("DSH_TEST_BOOTSTRAP")
    redis_url = os.environ.get("DSH_TEST_REDIS_URL")
    if bootstrap and redis_url:
        yield Servers(bootstrap, redis_url)
        return

    from deploy.local.processes import free_ports
    from deploy.local.settings import LocalStackSettings
    from deploy.local.stack import LocalStack

    kafka_port, controller_port, redis_port = free_ports(3)
    settings = LocalStackSettings(
        state_dir=tmp_path_factory.mktemp("stack"),
        kafka_port=kafka_port,
        controller_port=controller_port,
        redis_port=redis_port,
        partitions=TEST_PARTITIONS,
    )
    stack = LocalStack(settings, persistent=False)
    try:
        stack.up(create_topics=False)
        yield Servers(settings.bootstrap_servers(), settings.redis_url())
    finally:
        stack.down()


@pytest.fixture
def kafka_settings(servers: Servers) -> KafkaSettings:
    """Settings with a topic prefix of this test's own, so tests never see each other's records."""
    from servicekit.settings import KafkaSettings

    return KafkaSettings(
        bootstrap_servers=servers.bootstrap_servers,
        topic_prefix=f"test-{uuid.uuid4().hex[:12]}.dsh.session",
    )


@pytest.fixture
def topics(kafka_settings: KafkaSettings) -> KafkaSettings:
    """The contract's topics, created under this test's prefix."""
    from servicekit.topics import ensure_topics

    ensure_topics(kafka_settings, TEST_PARTITIONS)
    return kafka_settings


@pytest.fixture
def redis_client(servers: Servers) -> Iterator[redis.Redis]:
    import redis

    client = redis.Redis.from_url(servers.redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@dataclass(frozen=True)
class ClusterServers:
    url: str  # a seed node, for DSH_REDIS_URL with DSH_REDIS_CLUSTER=true
    ports: tuple[int, ...]
    local: Any  # the deploy.local.redis_cluster.LocalRedisCluster: stop or start a node


@pytest.fixture(scope="session")
def redis_cluster_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServers]:
    """A Redis Cluster of 3 primaries on free loopback ports, for the tests that ask for it."""
    from deploy.local.processes import free_ports
    from deploy.local.redis_cluster import LocalRedisCluster

    ports = free_ports(6)
    cluster = LocalRedisCluster(tmp_path_factory.mktemp("redis-cluster"), ports[:3], ports[3:])
    try:
        cluster.start()
        yield ClusterServers(cluster.url, tuple(ports[:3]), cluster)
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster(redis_cluster_servers: ClusterServers) -> Iterator[redis.RedisCluster]:
    import redis

    client = redis.RedisCluster.from_url(redis_cluster_servers.url)
    client.flushall()  # every primary
    try:
        yield client
    finally:
        client.flushall()
        client.close()
