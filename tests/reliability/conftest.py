"""The reliability suite's servers: one real 3-node KRaft cluster (replication factor 3, min
ISR 2) and a Redis on private loopback ports, shared by every test of the suite; each test
works in its own namespace (topic prefix, groups, Redis key prefix)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from deploy.local.stack import LocalStack
from tests.reliability.harness import PARTITIONS, Load, Namespace
from tests.support.topics import fresh_topics

RELIABILITY_DIR = os.path.dirname(__file__)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if str(item.fspath).startswith(RELIABILITY_DIR):
            item.add_marker(pytest.mark.reliability)


# SCRAM users of the cluster's SASL listener: the services' principal (a super user) and two
# tenants that may only do what the ACLs the security tests create allow.
SERVICE_USER = "dsh-service"
TENANTS = ("tenant-acme", "tenant-globex")
PASSWORDS = {u: SecretStr(f"pw-{secrets.token_hex(12)}") for u in (SERVICE_USER, *TENANTS)}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    from deploy.local.processes import free_port_block, free_ports
    from deploy.local.sasl import SaslKafkaCluster
    from deploy.local.settings import LocalStackSettings

    # Nodes use consecutive ports from the first one: listeners base…, controllers base + 5…,
    # SASL listeners base + 10….
    base = free_port_block(13)
    settings = LocalStackSettings(
        state_dir=tmp_path_factory.mktemp("reliability-stack"),
        brokers=3,
        kafka_port=base,
        controller_port=base + 5,
        redis_port=free_ports(1)[0],
        partitions=PARTITIONS,
    )
    stack = LocalStack(settings, persistent=False)
    # Every node also listens SASL_PLAINTEXT (SCRAM-SHA-512) with ACLs on; the plaintext
    # listener the fault tests use stays the operator's super-user door.
    stack.kafka = SaslKafkaCluster(
        settings, sasl_port=base + 10, users=PASSWORDS, acls=True, super_users=[SERVICE_USER]
    )
    try:
        stack.up(create_topics=False)
        yield stack
    finally:
        stack.down()


@pytest.fixture
def load() -> Load:
    return Load.from_env()


@pytest.fixture
def ns(cluster: LocalStack, tmp_path: Path) -> Namespace:
    """This test's topics on the shared cluster."""

    kafka = fresh_topics(cluster.settings.bootstrap_servers(), PARTITIONS, "rel")
    return Namespace(kafka, cluster.settings.redis_url(), tmp_path)


@pytest.fixture
def redis_client(cluster: LocalStack) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(cluster.settings.redis_url())
    try:
        yield client
    finally:
        client.close()
