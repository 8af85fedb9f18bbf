"""Security against locally started servers configured that way: the services and the client
over Kafka SASL/SCRAM-SHA-512 (the cluster's SASL listener, ACLs on), projectors on a Redis
that has no default user (ACL user + password), a wrong password refused at once with a typed
error, and no secret in any service log or /metrics page."""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from deploy.local.processes import ManagedProcess, free_ports
from deploy.local.redis_server import ensure_redis_server
from deploy.local.sasl import SaslKafkaCluster
from deploy.local.stack import LocalStack
from producers import SessionClient
from servicekit.kafka_errors import KafkaAuthenticationError
from servicekit.settings import KafkaSettings
from servicekit.topics import ensure_topics
from tests.reliability.conftest import PASSWORDS, SERVICE_USER
from tests.reliability.harness import (
    PARTITIONS,
    PROJECTIONS,
    History,
    LoadDriver,
    Namespace,
    Service,
    check_history,
    kafka_env,
    sessions_spread,
    split,
    verify_all,
)
from tests.support.processes import run_dsh
from tests.support.waiting import wait_for

REDIS_USER = "dsh-projector"
REDIS_PASSWORD = SecretStr("redis-pw-" + "7f3c9a1e5b")


def sasl_settings(
    cluster: LocalStack, user: str, password: SecretStr, prefix: str
) -> KafkaSettings:
    assert isinstance(cluster.kafka, SaslKafkaCluster)
    return KafkaSettings(
        bootstrap_servers=cluster.kafka.extra_bootstrap_servers(),
        topic_prefix=prefix,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=user,
        sasl_password=password,
    )


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis whose default user is off: only the projectors' ACL user gets in."""
    home = tmp_path_factory.mktemp("acl-redis")
    (port,) = free_ports(1)
    conf = home / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {home}",
                'save ""',
                "appendonly no",
                "user default off",
                f"user {REDIS_USER} on >{REDIS_PASSWORD.get_secret_value()} ~* &* +@all",
            ]
        )
        + "\n"
    )
    conf.chmod(0o600)
    process = ManagedProcess(
        "acl redis", home / "redis.pid", home / "redis.log", f"127.0.0.1:{port}"
    )
    process.start([ensure_redis_server(), str(conf)])
    try:
        client = redis.Redis(
            port=port, username=REDIS_USER, password=REDIS_PASSWORD.get_secret_value()
        )
        wait_for(lambda: _pings(client), 30, "the ACL Redis")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.kill()  # a throwaway server: no need to wait for a clean shutdown
        process.pid_file.unlink(missing_ok=True)


def _exited(service: Service) -> Callable[[], bool]:
    return lambda: not service.alive()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_services_over_sasl_scram_and_redis_acl_keep_every_secret_out_of_logs_and_metrics(
    cluster: LocalStack, acl_redis: str, tmp_path: Path
) -> None:
    import uuid

    prefix = f"sec-{uuid.uuid4().hex[:10]}.dsh.session"
    kafka = sasl_settings(cluster, SERVICE_USER, PASSWORDS[SERVICE_USER], prefix)
    ensure_topics(kafka, PARTITIONS)  # through the SASL listener, as the service user
    ns = Namespace(
        kafka,
        acl_redis,
        tmp_path,
        redis_env={
            "DSH_REDIS_USERNAME": REDIS_USER,
            "DSH_REDIS_PASSWORD": REDIS_PASSWORD.get_secret_value(),
        },
    )
    ports = free_ports(4)
    writers = [ns.writer(f"writer-{i}", metrics_port=ports[0] if i == 0 else 0) for i in (0, 1)]
    projectors = [
        ns.projector(p, metrics_port=port) for p, port in zip(PROJECTIONS, ports[1:], strict=True)
    ]
    services: list[Service] = [*writers, *projectors]
    r = redis.Redis.from_url(
        acl_redis, username=REDIS_USER, password=REDIS_PASSWORD.get_secret_value()
    )
    try:
        wait_for(lambda: split(writers), 90, "two writers over SASL splitting the partitions")
        sessions = sessions_spread(8, prefix="sec")
        history = History(sessions)
        with SessionClient(settings=kafka, timeout=20) as client, LoadDriver(client, history, 2):
            wait_for(lambda: all(n >= 12 for n in history.count_at().values()), 60, "load")
        assert not history.rejected
        check_history(kafka, history).assert_clean()
        verify_all(ns, r, sessions, 60)
        pages = [_metrics(port) for port in ports]
        assert "dsh_writer_appends_total" in pages[0]
        logs = [s.log() for s in services]
        assert all("Authentication" not in log for log in logs)
        for secret in [*PASSWORDS.values(), REDIS_PASSWORD]:
            value = secret.get_secret_value()
            for text in [*pages, *logs]:
                assert value not in text, "a secret leaked into a log or /metrics"
        assert all(s.alive() for s in services)
    finally:
        for s in services:
            s.close()
        r.close()


def test_a_wrong_kafka_password_fails_fast_with_a_typed_error(
    cluster: LocalStack, tmp_path: Path
) -> None:
    """The broker refuses the login; librdkafka reports ``_AUTHENTICATION`` through its
    error_cb, which every client built from the settings turns into
    ``KafkaAuthenticationError`` (code ``KAFKA_AUTHENTICATION``): ``SessionClient`` raises it
    within seconds (it used to say "Broker transport failure" after 30 s), and the writer and
    a projector exit with it (``dsh: error [KAFKA_AUTHENTICATION]``) instead of waiting. The
    password is in no message and no log."""
    wrong = SecretStr("not-the-password-4711")
    kafka = sasl_settings(cluster, SERVICE_USER, wrong, "sec-wrong.dsh.session")
    started = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as refused:
        SessionClient(settings=kafka, timeout=30)
    client_s = time.monotonic() - started
    # Seconds, not the 30 s of a transport failure (the bound leaves a loaded machine room).
    assert client_s < 15, f"the client took {client_s:.1f}s to report the refused login"
    assert refused.value.code == "KAFKA_AUTHENTICATION"
    assert SERVICE_USER in refused.value.message and "SCRAM-SHA-512" in refused.value.message
    assert wrong.get_secret_value() not in refused.value.message

    ns = Namespace(kafka, cluster.settings.redis_url(), tmp_path)
    services = [ns.writer("writer-wrong-password"), ns.projector("surface")]
    refusal = "Authentication failed during authentication due to invalid credentials"
    try:
        exited = {s.name: wait_for(_exited(s), 30, f"{s.name} exiting") for s in services}
        for service in services:
            log = service.log()
            assert "dsh: error [KAFKA_AUTHENTICATION]" in log, log[-2000:]
            assert refusal in log
            assert wrong.get_secret_value() not in log
            assert service.process is not None and service.process.returncode == 1
        # From process start: most of it is the interpreter importing the service.
        print("RELIABILITY wrong password:", f"client {client_s:.2f}s,", exited)
    finally:
        for service in services:
            service.close()


def test_kafkas_own_tools_log_in_with_the_pipelines_sasl_settings(
    cluster: LocalStack, tmp_path: Path
) -> None:
    """``dsh kafka TOOL`` hands the tool the ``DSH_KAFKA_*`` login (in a file of its own, gone
    afterwards), so it lists the topics over the SASL listener, where ACLs are on; the password
    is on no command line and in no output."""
    password = PASSWORDS[SERVICE_USER]
    kafka = sasl_settings(cluster, SERVICE_USER, password, "sec-tool.dsh.session")
    ensure_topics(kafka, PARTITIONS)
    env = {**os.environ, **kafka_env(kafka), "TMPDIR": str(tmp_path)}
    listed = run_dsh(env, "kafka", "topics", "--list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert kafka.topic("events") in listed.stdout.split()
    assert password.get_secret_value() not in listed.stdout + listed.stderr
    assert list(tmp_path.iterdir()) == []  # the properties file is removed


def test_redis_without_the_acl_password_is_refused(acl_redis: str) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(acl_redis).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(acl_redis, username=REDIS_USER, password="wrong").ping()


def _grant(cluster: LocalStack, user: str, kafka: KafkaSettings) -> None:
    """What a tenant's client needs: write commands, read its replies, see the topics."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported in stubs
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    grants = [
        ("commands", AclOperation.WRITE),
        ("commands", AclOperation.DESCRIBE),
        ("replies", AclOperation.READ),
        ("replies", AclOperation.DESCRIBE),
        ("events", AclOperation.DESCRIBE),
    ]
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            kafka.topic(topic),
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for topic, op in grants
    ]
    admin = AdminClient({"bootstrap.servers": cluster.settings.bootstrap_servers()})
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()


def test_a_tenant_credential_writes_only_its_session_id_prefix(
    cluster: LocalStack, tmp_path: Path
) -> None:
    import uuid

    from producers.tenancy import TenantForbiddenError

    prefix = f"ten-{uuid.uuid4().hex[:10]}.dsh.session"
    service = sasl_settings(cluster, SERVICE_USER, PASSWORDS[SERVICE_USER], prefix)
    ensure_topics(service, PARTITIONS)
    keys = {
        "tenant-acme": SecretStr("acme-key-" + uuid.uuid4().hex),
        "tenant-globex": SecretStr("globex-key-" + uuid.uuid4().hex),
    }
    _grant(cluster, "tenant-acme", service)
    ns = Namespace(service, cluster.settings.redis_url(), tmp_path)
    writer = ns.writer(
        "writer-tenants",
        tenant_prefixes="tenant-acme=acme-|shared-,tenant-globex=globex-",
        tenant_keys=",".join(f"{t}={k.get_secret_value()}" for t, k in keys.items()),
    )
    try:
        wait_for(lambda: split([writer]), 90, "the writer owning every partition")
        acme = sasl_settings(cluster, "tenant-acme", PASSWORDS["tenant-acme"], prefix)
        with SessionClient(
            settings=acme, timeout=20, tenant="tenant-acme", tenant_key=keys["tenant-acme"]
        ) as client:
            assert client.append("acme-1", "turn/start", {"turn": 1}).seq == 0
            assert client.append("shared-1", "turn/start", {"turn": 1}).seq == 0
            with pytest.raises(TenantForbiddenError) as caught:
                client.append("globex-1", "turn/start", {"turn": 1})
            assert caught.value.code == "TENANT_PREFIX_FORBIDDEN"
            assert [e.seq for e in client.read("acme-1").events()] == [0]
            with pytest.raises(TenantForbiddenError) as caught:
                client.read("globex-1")  # another tenant's session is not read either
            assert caught.value.code == "TENANT_PREFIX_FORBIDDEN"
        # The right Kafka principal, the wrong tenant key (e.g. another tenant's name).
        with SessionClient(
            settings=acme, timeout=20, tenant="tenant-globex", tenant_key=keys["tenant-acme"]
        ) as client:
            with pytest.raises(TenantForbiddenError) as caught:
                client.append("globex-1", "turn/start", {"turn": 1})
            assert caught.value.code == "TENANT_BAD_MAC"
        # No tenant credential at all (a service principal that may write the topic).
        with SessionClient(settings=service, timeout=20) as client:
            with pytest.raises(TenantForbiddenError) as caught:
                client.append("acme-2", "turn/start", {"turn": 1})
            assert caught.value.code == "TENANT_MISSING"
            with pytest.raises(TenantForbiddenError) as caught:
                client.read("acme-1")  # a read needs the tenant's credential, as an append does
            assert caught.value.code == "TENANT_MISSING"
        # A principal without a Kafka ACL on the commands topic cannot even start a client.
        globex = sasl_settings(cluster, "tenant-globex", PASSWORDS["tenant-globex"], prefix)
        with pytest.raises(Exception, match=r"missing|[Aa]uthoriz"):
            SessionClient(settings=globex, timeout=5)
        log = writer.log()
        assert all(k.get_secret_value() not in log for k in keys.values())
        assert writer.alive()
    finally:
        writer.close()
