"""Kafka over TLS against a real broker: the writer and a client verify the broker's
certificate with DSH_KAFKA_SSL_CA_LOCATION and append through it; a CA that did not sign the
broker's certificate is a typed error at once (KAFKA_TLS), not a 30 s "transport failure"."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.processes import free_ports
from deploy.local.settings import LocalStackSettings
from deploy.local.tls import LocalCa, TlsKafkaCluster, make_test_ca
from producers import SessionClient
from servicekit.kafka_errors import KafkaTlsError
from servicekit.settings import KafkaSettings
from servicekit.topics import ensure_topics
from tests.integration.writer_support import (
    PARTITIONS,
    running_writer,
    writer_settings,
)
from tests.support.builders import user
from tests.support.processes import run_dsh


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafkaCluster]:
    home = tmp_path_factory.mktemp("tls-stack")
    kafka_port, controller_port, ssl_port, redis_port = free_ports(4)
    settings = LocalStackSettings(
        state_dir=home / "state",
        kafka_port=kafka_port,
        controller_port=controller_port,
        redis_port=redis_port,
    )
    cluster = TlsKafkaCluster(settings, ssl_port=ssl_port, ca=make_test_ca(home / "ca"))
    try:
        cluster.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


def _over_tls(cluster: TlsKafkaCluster, ca_file: Path, prefix: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=cluster.extra_bootstrap_servers(),
        topic_prefix=prefix,
        security_protocol="SSL",
        ssl_ca_location=str(ca_file),
    )


def test_the_writer_and_a_client_append_over_tls(tls_cluster: TlsKafkaCluster) -> None:
    prefix = f"tls-{uuid.uuid4().hex[:8]}.dsh.session"
    ensure_topics(KafkaSettings(bootstrap_servers=tls_cluster.bootstrap_servers,
                                topic_prefix=prefix), PARTITIONS)  # fmt: skip
    kafka = _over_tls(tls_cluster, tls_cluster.ca.ca_cert, prefix)
    with running_writer(kafka, writer_settings()), SessionClient(settings=kafka) as client:
        first = client.append("tls-s", "user/message", user("u0"), surface_op="append")
        second = client.append("tls-s", "user/message", user("u1"), surface_op="append")
        restored = client.read("tls-s")
    assert (first.seq, second.seq) == (0, 1)
    assert [e.data["id"] for e in restored.events()] == ["u0", "u1"]


def test_a_ca_that_did_not_sign_the_broker_is_a_typed_error_at_once(
    tls_cluster: TlsKafkaCluster, tmp_path: Path
) -> None:
    other: LocalCa = make_test_ca(tmp_path / "other-ca", name="not-the-brokers-ca")
    kafka = _over_tls(tls_cluster, other.ca_cert, "tls-wrong.dsh.session")
    started = time.monotonic()
    with pytest.raises(KafkaTlsError) as refused:
        SessionClient(settings=kafka, timeout=30)
    took = time.monotonic() - started
    assert refused.value.code == "KAFKA_TLS"
    assert str(other.ca_cert) in refused.value.message
    assert "certificate verify failed" in refused.value.message
    # Not a timing benchmark: the start-up check's own timeout is 30 s, and this fails on
    # the first handshake instead.
    assert took < 15, took


def test_kafkas_own_tools_verify_the_broker_with_the_pipelines_ca(
    tls_cluster: TlsKafkaCluster, tmp_path: Path
) -> None:
    """``dsh kafka TOOL`` over TLS (``DSH_KAFKA_SECURITY_PROTOCOL=SSL``): the tool trusts the
    broker through ``DSH_KAFKA_SSL_CA_LOCATION``, as the services do; a path that is not
    plain ASCII reaches the tool as it is."""
    ca_file = tmp_path / "certs é = #1" / "ca.pem"
    ca_file.parent.mkdir()
    shutil.copy(tls_cluster.ca.ca_cert, ca_file)
    kafka = _over_tls(tls_cluster, ca_file, f"tool-{uuid.uuid4().hex[:8]}")
    ensure_topics(kafka, PARTITIONS)
    env = {
        **os.environ,
        "DSH_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "DSH_KAFKA_SECURITY_PROTOCOL": "SSL",
        "DSH_KAFKA_SSL_CA_LOCATION": str(ca_file),
    }
    listed = run_dsh(env, "kafka", "topics", "--list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert kafka.topic("events") in listed.stdout.split()
