"""Typed settings from the environment: unknown names refused, secrets kept out of sight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import redis
from confluent_kafka import KafkaError
from pydantic import SecretStr

from cli import main
from deploy.local.settings import LocalStackSettings
from producers import SessionClient
from producers.writer.settings import WriterSettings
from projectors.settings import ProjectorSettings
from servicekit.kafka_errors import FailFast, KafkaAuthenticationError
from servicekit.redis_clients import redis_client
from servicekit.settings import ConfigError, KafkaSettings, RedisSettings


def test_kafka_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", "10.0.0.1:9093")
    monkeypatch.setenv("DSH_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("DSH_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("DSH_KAFKA_SASL_USERNAME", "writer")
    monkeypatch.setenv("DSH_KAFKA_SASL_PASSWORD", "s3cret")
    settings = KafkaSettings()
    config = settings.client_config()
    fail_fast = config.pop("error_cb")
    assert config == {
        "bootstrap.servers": "10.0.0.1:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "writer",
        "sasl.password": "s3cret",
    }
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings)
    assert isinstance(fail_fast, FailFast)
    assert "s3cret" not in fail_fast.refused + fail_fast.unverified
    assert fail_fast.scrub("echoed s3cret") == "echoed ***"


def test_a_refused_login_reported_by_librdkafka_raises_the_typed_error() -> None:
    fail_fast = KafkaSettings(
        security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="writer"
    ).client_config()["error_cb"]
    fail_fast(KafkaError(KafkaError._TRANSPORT, "broker down"))  # librdkafka retries this
    with pytest.raises(KafkaAuthenticationError) as refused:
        fail_fast(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid"))
    assert refused.value.code == "KAFKA_AUTHENTICATION"
    assert "writer" in refused.value.message and "invalid" in refused.value.message


def test_librdkafka_debug_contexts_are_checked_before_any_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSH_KAFKA_DEBUG", "cgrp, eos")
    assert KafkaSettings().client_config()["debug"] == "cgrp,eos"
    assert "debug" not in KafkaSettings(debug=None).client_config()
    for bad in ("cgrp,transactions", " , "):
        monkeypatch.setenv("DSH_KAFKA_DEBUG", bad)
        with pytest.raises(ConfigError) as info:
            KafkaSettings()
        assert info.value.code == "BAD_KAFKA_DEBUG"


@pytest.mark.parametrize("name", ["DSH_KAFKA_BOOTSTRAP_SERVER", "dsh_kafka_bootstrap_server"])
def test_a_misspelt_variable_is_an_error_not_a_silent_default(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """In either case: pydantic-settings reads names in any case, and so does this check."""
    monkeypatch.setenv(name, "10.0.0.1:9093")
    with pytest.raises(ConfigError, match=name) as info:
        KafkaSettings()
    assert info.value.code == "UNKNOWN_SETTING"


def test_a_known_variable_in_lower_case_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("dsh_kafka_bootstrap_servers", "10.0.0.1:9093")
    assert KafkaSettings().bootstrap_servers == "10.0.0.1:9093"


@pytest.mark.parametrize(
    ("settings", "code"),
    [
        ({"sasl_username": "writer", "sasl_password": "pw"}, "KAFKA_SECURITY_UNUSED"),
        ({"ssl_ca_location": "/etc/ca.pem"}, "KAFKA_SECURITY_UNUSED"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "ssl_ca_location": "/etc/ca.pem"},
            "KAFKA_SECURITY_UNUSED",
        ),
        ({"security_protocol": "SASL_SSL", "sasl_username": "writer"}, "KAFKA_SASL_MECHANISM"),
        (
            {"security_protocol": "SSL", "ssl_certificate_location": "/etc/client.pem"},
            "KAFKA_TLS_CLIENT_PAIR",
        ),
        (
            {"security_protocol": "SSL", "ssl_key_location": "/etc/client.key"},
            "KAFKA_TLS_CLIENT_PAIR",
        ),
        ({"security_protocol": "SSL", "ssl_key_password": "pw"}, "KAFKA_TLS_CLIENT_PAIR"),
    ],
)
def test_security_settings_the_protocol_would_not_use_are_refused(
    settings: dict[str, Any], code: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        KafkaSettings(**settings)
    assert refused.value.code == code
    assert "pw" not in refused.value.message


def test_a_refused_setting_is_a_one_line_error_of_the_cli_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSH_KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    assert main(["verify", "some-session"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dsh: error [BAD_SETTING]: DSH_KAFKA_SECURITY_PROTOCOL: ")
    assert "sasl_ssl" not in err  # the value is not echoed: it could be a secret


def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_KAFKA_SECURITY_PROTOCOL", "TELNET")
    with pytest.raises(ValueError, match="security_protocol"):
        KafkaSettings()


def test_redis_password_is_secret_and_passed_to_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSH_REDIS_PASSWORD", "hunter2")
    settings = RedisSettings()
    assert settings.client_kwargs() == {
        "password": "hunter2",
        "socket_connect_timeout": 5.0,
        "socket_timeout": 10.0,
    }
    assert "hunter2" not in repr(settings)


def test_redis_cluster_is_chosen_by_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RedisSettings().cluster is False
    monkeypatch.setenv("DSH_REDIS_CLUSTER", "true")
    monkeypatch.setenv("DSH_REDIS_URL", "redis://10.0.0.5:7000/0")
    settings = RedisSettings()
    assert settings.cluster is True
    assert settings.client_kwargs() == {"socket_connect_timeout": 5.0, "socket_timeout": 10.0}
    monkeypatch.setenv("DSH_REDIS_CLUSTER", "maybe")
    with pytest.raises(ValueError):
        RedisSettings()


@pytest.mark.parametrize("sentinels", [None, "127.0.0.1:26379,127.0.0.1:26380"])
def test_a_redis_pool_takes_the_size_it_is_given_behind_sentinels_too(
    sentinels: str | None,
) -> None:
    """`dsh serve` sizes its pool for its threads and its streams; redis-py's default of 100
    would refuse the rest with MaxConnectionsError. No connection is made here."""
    settings = RedisSettings(url=SecretStr("redis://127.0.0.1:1/2"), sentinels=sentinels)
    client = redis_client(settings, max_connections=140)
    assert isinstance(client, redis.Redis)
    pool = client.connection_pool
    assert pool.max_connections == 140 and pool.connection_kwargs["db"] == 2


def test_a_redis_ca_without_a_tls_url_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        RedisSettings(url=SecretStr("redis://10.0.0.5:6379/0"), ssl_ca_certs="/etc/ca.pem")
    assert refused.value.code == "REDIS_TLS_URL"


@pytest.mark.parametrize("settings", [ProjectorSettings, WriterSettings])
def test_a_poll_interval_shorter_than_its_session_is_refused(settings: Any) -> None:
    # librdkafka would refuse the consumer only when the service starts, naming neither.
    with pytest.raises(ConfigError) as refused:
        settings(max_poll_interval_ms=6_000, session_timeout_ms=10_000)
    assert refused.value.code == "BAD_POLL_INTERVAL"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://:s3cret/pw@redis.internal:6379/0", "port"),  # an unescaped "/" in the password
        ("redis.internal:6379", "redis://"),
        ("redis://u:s3cret@redis.internal:99999/0", "port"),
        ("redis://u:s3cret@redis.internal:6379/zero", "database"),
        ("redis://u:s3cret@redis.internal:6379?db=one", "db parameter"),
    ],
)
def test_a_redis_url_redis_py_would_refuse_is_refused_without_quoting_it(
    url: str, problem: str
) -> None:
    """redis-py (and Python, for a port) would fail at the first connection with a message
    quoting the URL, password included."""
    with pytest.raises(ConfigError) as refused:
        RedisSettings(url=SecretStr(url))
    assert refused.value.code == "BAD_REDIS_URL"
    assert problem in refused.value.message
    assert "s3cret" not in refused.value.message and "redis.internal" not in refused.value.message


def test_a_bad_redis_url_is_a_one_line_error_of_the_cli_without_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSH_REDIS_URL", "redis://:s3cret/pw@127.0.0.1:6379/0")
    assert main(["show", "surface", "some-session"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("dsh: error [BAD_REDIS_URL]: DSH_REDIS_URL ")
    assert "s3cret" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "url",
    [
        "redis://:p%2Fw@127.0.0.1:6379/2",
        "rediss://app:pw@redis.internal:6380/0?db=3",
        "unix:///run/redis.sock?db=1",
        "redis://127.0.0.1",
    ],
)
def test_the_redis_urls_redis_py_takes_are_taken(url: str) -> None:
    assert RedisSettings(url=SecretStr(url)).url.get_secret_value() == url


def test_behind_sentinels_the_primary_gets_the_urls_tls_and_credentials(tmp_path: Path) -> None:
    """With Sentinels the URL gives the database only to the lookup: its TLS, user and
    password must still reach the primary (and TLS the Sentinels), or the connection is
    plain and unauthenticated. No connection is made here."""
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = RedisSettings(
        url=SecretStr("rediss://app%40acme:p%2Fw@ignored:6379/2"),
        sentinels="127.0.0.1:26379",
        ssl_ca_certs=str(ca),
        sentinel_password=SecretStr("sentinel-secret"),
    )
    client = redis_client(settings)
    assert isinstance(client, redis.Redis)
    pool: Any = client.connection_pool
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (2, "app@acme", "p/w")
    assert kwargs["ssl_ca_certs"] == str(ca)
    assert type(pool.make_connection()).__name__ == "SentinelManagedSSLConnection"
    sentinel = pool.sentinel_manager.sentinels[0].connection_pool
    assert sentinel.connection_class.__name__ == "SSLConnection"
    assert sentinel.connection_kwargs["password"] == "sentinel-secret"


def test_sentinel_addresses_take_sentinels_own_port_and_refuse_what_is_not_one() -> None:
    sentinels = RedisSettings(sentinels="s0, s1:26380,")
    assert sentinels.sentinel_addresses() == [("s0", 26379), ("s1", 26380)]
    for bad in ("s0:26379x", "s0:", ":26379", "s0:99999"):
        with pytest.raises(ConfigError) as refused:
            RedisSettings(sentinels=bad).sentinel_addresses()
        assert refused.value.code == "BAD_REDIS_SENTINELS"


def test_topics_carry_the_configured_prefix() -> None:
    assert KafkaSettings(topic_prefix="acme.dsh").topic("events") == "acme.dsh.events"


def test_local_stack_ports_for_a_three_node_cluster() -> None:
    settings = LocalStackSettings(brokers=3, kafka_port=30000)
    assert settings.bootstrap_servers() == "127.0.0.1:30000,127.0.0.1:30001,127.0.0.1:30002"


@pytest.mark.parametrize("linger_ms", [-1.0, 1000.5])
def test_a_client_linger_out_of_range_is_refused_before_any_connection(linger_ms: float) -> None:
    # An unreachable address: the check must come first, or this would wait for a broker.
    with pytest.raises(ConfigError) as refused:
        SessionClient("127.0.0.1:1", linger_ms=linger_ms)
    assert refused.value.code == "BAD_LINGER"


def test_new_cluster_ids_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    from deploy.local import kafka

    # 0xF8 encodes to "-" in URL-safe base64; the next draw must be taken instead.
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x00" * 16)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert kafka.new_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"
    monkeypatch.undo()
    ids = [kafka.new_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


@pytest.mark.parametrize("refused", [True, False], ids=["refused login", "no broker"])
def test_a_failed_start_up_check_leaves_no_client_behind(
    monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    """A caller may hold the typed error for long (a test's ``pytest.raises``, a supervisor's
    last failure); the admin client must not live on in it, retrying and logging."""
    import gc
    import weakref

    from confluent_kafka.admin import AdminClient

    from servicekit import kafka_clients, kafka_errors
    from servicekit.kafka_errors import KafkaUnreachableError
    from servicekit.topics import cluster_topics

    made: list[weakref.ref[AdminClient]] = []

    class Tracked(AdminClient):
        def __init__(self, conf: dict[str, Any]) -> None:
            super().__init__(conf)
            made.append(weakref.ref(self))

    monkeypatch.setattr(kafka_clients, "AdminClient", Tracked)
    if refused:  # a closed port stands in for a broker refusing the login
        monkeypatch.setattr(kafka_errors, "_AUTHENTICATION", frozenset({KafkaError._TRANSPORT}))
    expected = KafkaAuthenticationError if refused else KafkaUnreachableError
    with pytest.raises(expected) as failure:
        cluster_topics(KafkaSettings(bootstrap_servers="127.0.0.1:1"), timeout_s=1)
    gc.collect()
    assert failure.value is not None and made and made[0]() is None


def test_creating_topics_on_no_cluster_is_kafka_unreachable() -> None:
    """`dsh up` and the topics Job create the topics: with no broker there, a typed error
    naming the servers, not a KafkaException traceback."""
    from servicekit.kafka_errors import KafkaUnreachableError
    from servicekit.topics import ensure_topics

    with pytest.raises(KafkaUnreachableError, match=r"127\.0\.0\.1:1"):
        ensure_topics(KafkaSettings(bootstrap_servers="127.0.0.1:1"), 4, timeout_s=1)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DSH_PROJECTOR_BATCH_SIZE", "0"),  # consume(-1) failed mid-run
        ("DSH_PROJECTOR_POLL_TIMEOUT_S", "-1"),
        ("DSH_PROJECTOR_SENTINEL_INTERVAL_S", "0"),
        ("DSH_PROJECTOR_SESSION_TIMEOUT_MS", "5"),
        ("DSH_PROJECTOR_METRICS_PORT", "70000"),
        ("DSH_PROJECTOR_CACHE_SESSIONS", "-1"),
        ("DSH_PROJECTOR_REPLAY_WORKERS", "-2"),
    ],
)
def test_a_projector_setting_out_of_its_range_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    from projectors.settings import ProjectorSettings
    from servicekit.settings import settings_error

    monkeypatch.setenv(name, value)
    with pytest.raises(pydantic.ValidationError) as refused:
        ProjectorSettings()
    error = settings_error(refused.value)
    assert error is not None
    assert error.code == "BAD_SETTING" and error.message.startswith(f"{name}: ")


@pytest.mark.parametrize(
    ("env", "names"),
    [
        (  # PLAIN and SCRAM log in with a user and a password: librdkafka refuses either alone
            {"DSH_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "DSH_KAFKA_SASL_MECHANISM": "PLAIN"},
            ["DSH_KAFKA_SASL_USERNAME", "DSH_KAFKA_SASL_PASSWORD"],
        ),
        (
            {"DSH_KAFKA_SECURITY_PROTOCOL": "SSL", "DSH_KAFKA_SSL_CA_LOCATION": "/nonexistent/ca"},
            ["DSH_KAFKA_SSL_CA_LOCATION", "/nonexistent/ca"],
        ),
    ],
)
def test_settings_librdkafka_refuses_when_making_a_client_are_a_one_line_typed_error(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    env: dict[str, str],
    names: list[str],
) -> None:
    """Every command makes its first Kafka client before it reaches a broker: a setting that
    client refuses was a KafkaException traceback, naming librdkafka's property at best."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["export", str(tmp_path / "out"), "--timeout", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dsh: error [KAFKA_CLIENT_CONFIG]: "), err
    assert all(name in err for name in names), err


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1?db=3",
        "redis://127.0.0.1:1/2?db=3",
        "redis://127.0.0.1:1/2",
        "redis://u:p%2Fw@127.0.0.1:1/0?socket_timeout=3",
        "rediss://127.0.0.1:1/1?ssl_cert_reqs=none&ssl_check_hostname=false",
    ],
)
def test_behind_sentinels_the_primary_gets_what_the_url_gives_one_server(url: str) -> None:
    """``?db=3`` chose database 3 of one server, and database 0 behind Sentinels: a projector
    moved behind Sentinels wrote its read models into another database; other parameters of
    the URL were dropped. No connection is made here."""
    alone = redis_client(RedisSettings(url=SecretStr(url)))
    behind = redis_client(RedisSettings(url=SecretStr(url), sentinels="127.0.0.1:26379"))
    assert isinstance(alone, redis.Redis) and isinstance(behind, redis.Redis)
    given = alone.connection_pool.connection_kwargs
    got = behind.connection_pool.connection_kwargs
    for name in ("db", "username", "password", "socket_timeout", "ssl_cert_reqs"):
        assert got.get(name) == given.get(name), name
    tls = url.startswith("rediss:")
    assert issubclass(behind.connection_pool.connection_class, redis.SSLConnection) == tls


def test_a_redis_cluster_behind_sentinels_is_refused_not_ignored() -> None:
    """Sentinels watch one primary; DSH_REDIS_CLUSTER was silently dropped beside them."""
    with pytest.raises(ConfigError) as refused:
        RedisSettings(cluster=True, sentinels="127.0.0.1:26379")
    assert refused.value.code == "REDIS_SENTINELS_CLUSTER"
    assert "DSH_REDIS_CLUSTER" in refused.value.message
    assert "DSH_REDIS_SENTINELS" in refused.value.message


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/2", "redis://127.0.0.1:1?db=1"])
def test_a_redis_cluster_url_naming_another_database_is_refused(url: str) -> None:
    """redis-py refused it when the client was made, and `dsh` reported it as a Redis that
    did not answer."""
    with pytest.raises(ConfigError) as refused:
        RedisSettings(url=SecretStr(url), cluster=True)
    assert refused.value.code == "REDIS_CLUSTER_DATABASE"
    RedisSettings(url=SecretStr("redis://127.0.0.1:1/0"), cluster=True)
    RedisSettings(url=SecretStr(url))  # one server has databases
