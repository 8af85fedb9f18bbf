"""Typed settings read from the environment, shared by every service and tool.

Each settings class reads variables with its own prefix. A variable that carries the prefix
but names no field is an error: a typo such as ``DSH_KAFKA_BOOTSTRAP_SERVER`` must not silently
fall back to a default and point a service at the wrong cluster.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

import pydantic
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from dsh.errors import SessionError, register_error
from servicekit.kafka_errors import FailFast


@register_error
class ConfigError(SessionError):
    default_code = "CONFIG"


# What librdkafka's ``debug`` property accepts (its CONFIGURATION.md); one string keeps the
# list on two lines instead of twenty-one.
LIBRDKAFKA_DEBUG_CONTEXTS = frozenset(
    "generic broker topic metadata feature queue msg protocol cgrp security fetch interceptor "  # noqa: SIM905
    "plugin consumer admin eos mock assignor conf telemetry all".split()
)


class StrictSettings(BaseSettings):
    """Settings that refuse unknown variables under their prefix."""

    # Each field's docstring is its description: docs/settings.md is generated from them.
    model_config = SettingsConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_variables(cls, values: Any) -> Any:
        prefix = cls.model_config.get("env_prefix", "")
        if prefix:
            known = {prefix + name.upper() for name in cls.model_fields}
            # Upper-cased as pydantic-settings reads names: `dsh_kafka_bootstrap_server` is a
            # typo of ours too.
            unknown = sorted(
                k for k in os.environ if k.upper().startswith(prefix) and k.upper() not in known
            )
            if unknown:
                raise ConfigError(
                    f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                    code="UNKNOWN_SETTING",
                )
        return values


def check_poll_interval(prefix: str, poll_interval_ms: int, session_timeout_ms: int) -> None:
    """A consumer's max.poll.interval.ms must cover its session.timeout.ms: librdkafka refuses
    the consumer otherwise, as the service starts, naming neither setting."""
    if poll_interval_ms < session_timeout_ms:
        raise ConfigError(
            f"{prefix}MAX_POLL_INTERVAL_MS ({poll_interval_ms}) must be at least "
            f"{prefix}SESSION_TIMEOUT_MS ({session_timeout_ms})",
            code="BAD_POLL_INTERVAL",
        )


class KafkaSettings(StrictSettings):
    """How services reach Kafka (``DSH_KAFKA_*``). Secrets never appear in ``repr`` or logs."""

    model_config = SettingsConfigDict(env_prefix="DSH_KAFKA_", extra="forbid", frozen=True)

    bootstrap_servers: str = "127.0.0.1:19092"
    """Kafka brokers to start from, `host:port[,host:port…]` (the default is the local stack)."""
    topic_prefix: str = "dsh.session"
    """Topics are `<prefix>.commands`, `.events`, `.replies`, `.snapshots` and `.dlq`; every
    service and client of one pipeline uses the same prefix."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How to talk to the brokers: TLS with `SSL` and `SASL_SSL`, a SASL login with the `SASL_`
    ones."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    """SASL mechanism of the login."""
    sasl_username: str | None = None
    """SASL user."""
    sasl_password: SecretStr | None = None
    """SASL password; a refused login fails at start with `KAFKA_AUTHENTICATION`."""
    ssl_ca_location: str | None = None
    """CA certificate (PEM file) that verifies the brokers (default: the system's CA store); a
    broker certificate it does not verify fails with `KAFKA_TLS`."""
    ssl_certificate_location: str | None = None
    """Client certificate (PEM file), for brokers that ask for one."""
    ssl_key_location: str | None = None
    """Private key of the client certificate (PEM file)."""
    ssl_key_password: SecretStr | None = None
    """Password of that private key."""
    # What a group or transaction coordinator answered, and when, is nowhere else to be seen.
    debug: str | None = None
    """librdkafka debug contexts for every Kafka client of the process, comma-separated
    (`cgrp,eos`, `fetch,metadata`, …), written to stderr; an unknown one is `BAD_KAFKA_DEBUG`."""

    @model_validator(mode="after")
    def _security_settings_apply(self) -> KafkaSettings:
        """A SASL or TLS setting the protocol would not use is a mistake, not a default: the
        deployment would believe it logs in, or verifies the brokers, and do neither."""
        protocol = self.security_protocol
        sasl = ("sasl_mechanism", "sasl_username", "sasl_password")
        tls = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")
        unused = [n for n in sasl if not protocol.startswith("SASL_") and getattr(self, n)]
        unused += [
            n for n in (*tls, "ssl_key_password") if "SSL" not in protocol and getattr(self, n)
        ]
        if unused:
            names = ", ".join(f"DSH_KAFKA_{n.upper()}" for n in unused)
            raise ConfigError(
                f"{names} set, but DSH_KAFKA_SECURITY_PROTOCOL is {protocol}, which does not "
                "use them",
                code="KAFKA_SECURITY_UNUSED",
            )
        key = self.ssl_key_location
        if (self.ssl_certificate_location is None) != (key is None) or (
            self.ssl_key_password is not None and key is None
        ):
            raise ConfigError(
                "DSH_KAFKA_SSL_CERTIFICATE_LOCATION and DSH_KAFKA_SSL_KEY_LOCATION go together "
                "(a client certificate is sent with its key), and DSH_KAFKA_SSL_KEY_PASSWORD "
                "needs the key",
                code="KAFKA_TLS_CLIENT_PAIR",
            )
        if protocol.startswith("SASL_") and self.sasl_mechanism is None:
            raise ConfigError(
                f"DSH_KAFKA_SECURITY_PROTOCOL is {protocol}: set DSH_KAFKA_SASL_MECHANISM "
                "(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)",
                code="KAFKA_SASL_MECHANISM",
            )
        return self

    @field_validator("debug")
    @classmethod
    def _known_debug_contexts(cls, value: str | None) -> str | None:
        if value is None:
            return None
        contexts = [c.strip() for c in value.split(",") if c.strip()]
        unknown = sorted(set(contexts) - LIBRDKAFKA_DEBUG_CONTEXTS)
        if unknown or not contexts:
            raise ConfigError(
                f"DSH_KAFKA_DEBUG: unknown librdkafka debug context(s) {unknown or value!r}; "
                f"known: {', '.join(sorted(LIBRDKAFKA_DEBUG_CONTEXTS))}",
                code="BAD_KAFKA_DEBUG",
            )
        return ",".join(contexts)

    def client_config(self) -> dict[str, Any]:
        """The librdkafka settings shared by every producer, consumer and admin client, with
        an ``error_cb`` that turns a refused login into ``KafkaAuthenticationError`` and a
        broker certificate that fails verification into ``KafkaTlsError``."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
            "error_cb": FailFast(
                f"Kafka at {self.bootstrap_servers} refused the login of "
                f"{self.sasl_username or '(no user)'} "
                f"({self.sasl_mechanism or self.security_protocol})",
                f"Kafka at {self.bootstrap_servers}: the broker's TLS certificate failed "
                f"verification against {self.ssl_ca_location or 'the system CA store'} "
                "(DSH_KAFKA_SSL_CA_LOCATION)",
                [s.get_secret_value() for s in (self.sasl_password, self.ssl_key_password) if s],
            ),
        }
        optional: dict[str, str | SecretStr | None] = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password,
            "debug": self.debug,
        }
        for key, value in optional.items():
            if value is not None:
                config[key] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return config

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}.{name}"


class RedisSettings(StrictSettings):
    """How services reach Redis (``DSH_REDIS_*``): one server, or a Redis Cluster when
    ``cluster`` is true (then ``url`` names any one node of it, database 0; the client learns
    the others and the slot map from it)."""

    model_config = SettingsConfigDict(env_prefix="DSH_REDIS_", extra="forbid", frozen=True)

    url: SecretStr = SecretStr("redis://127.0.0.1:16379/0")
    """Redis URL (`rediss://` for TLS); with `cluster`, any one node of the cluster, database 0.
    Secret, as a URL may hold a password."""
    cluster: bool = False
    """`true`: a Redis Cluster, whose other nodes and slot map the client learns from `url`."""
    username: str | None = None
    """ACL user."""
    password: SecretStr | None = None
    """Password of the ACL user (or of `AUTH` without one)."""
    ssl_ca_certs: str | None = None
    """CA certificate (PEM file) that verifies the Redis server over TLS."""
    # Without them a Redis that accepts and never answers (a frozen host, a full backlog)
    # stalls a projector's loop and every readiness check for ever.
    socket_connect_timeout_s: Annotated[float, Field(gt=0)] = 5.0
    """How long a connection to Redis may take before it fails (and is retried)."""
    socket_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    """How long a command may wait for Redis's answer before it fails (and is retried); keep
    it above the longest blocking read (`dsh tail`'s `XREAD BLOCK` waits 1 s)."""
    sentinels: str | None = None
    """Redis Sentinels, `host:port,host:port,…` (port 26379 if left out): the client asks them
    for the primary of `sentinel_master` (then `url` gives the database, the credentials and
    TLS), and again when it fails over."""
    sentinel_master: str = "dsh"
    """The name the Sentinels monitor the primary under."""
    sentinel_password: SecretStr | None = None
    """Password of the Sentinels themselves (their `requirepass`), if they ask for one."""

    @field_validator("url")
    @classmethod
    def _url_parses(cls, url: SecretStr) -> SecretStr:
        # Checked here because redis-py's own complaint about a URL quotes it, and the URL may
        # hold the password; so does Python's about a port, which is where a password with an
        # unescaped "/", "#" or "?" ends up.
        problem = _redis_url_problem(url.get_secret_value())
        if problem:
            raise ConfigError(
                f"DSH_REDIS_URL is not a Redis URL: {problem} (its value is not shown: it may "
                "hold a password; percent-encode any '/', '#', '?' or '@' in the password)",
                code="BAD_REDIS_URL",
            )
        return url

    @model_validator(mode="after")
    def _sentinels_watch_one_primary(self) -> RedisSettings:
        # The client follows the Sentinels' primary and would drop `cluster` without a word.
        if self.cluster and self.sentinels:
            raise ConfigError(
                "DSH_REDIS_CLUSTER and DSH_REDIS_SENTINELS exclude each other: Sentinels watch "
                "one primary, a Redis Cluster fails over by itself; set one of them",
                code="REDIS_SENTINELS_CLUSTER",
            )
        return self

    @model_validator(mode="after")
    def _a_cluster_has_database_zero(self) -> RedisSettings:
        # redis-py refuses it when the client is made, as a RedisClusterException that the
        # commands cannot tell from a cluster that does not answer.
        if self.cluster and _redis_url_database(self.url.get_secret_value()) != 0:
            raise ConfigError(
                "DSH_REDIS_URL names a database other than 0, and a Redis Cluster (DSH_REDIS_"
                "CLUSTER) has only database 0: drop the database from the URL, or use key "
                "prefixes (DSH_PROJECTOR_KEY_PREFIX) to share the cluster",
                code="REDIS_CLUSTER_DATABASE",
            )
        return self

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> RedisSettings:
        # A CA with a redis:// URL would be a plain connection that fails at its first use
        # with a TypeError, or, worse, a deployment that believes it has TLS.
        if self.ssl_ca_certs is not None and not self.url.get_secret_value().startswith(
            "rediss://"
        ):
            raise ConfigError(
                "DSH_REDIS_SSL_CA_CERTS verifies a TLS connection: DSH_REDIS_URL must then be "
                "rediss://",
                code="REDIS_TLS_URL",
            )
        return self

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``sentinels`` as (host, port) pairs; a host without a port is on Sentinel's own,
        26379."""
        pairs = []
        for item in (self.sentinels or "").split(","):
            item = item.strip()
            if not item:
                continue
            host, colon, port = item.rpartition(":")
            if not colon:
                host, port = item, "26379"
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    f"DSH_REDIS_SENTINELS: {item!r} is not host:port",
                    code="BAD_REDIS_SENTINELS",
                )
            pairs.append((host, int(port)))
        return pairs

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis.from_url(url, **kwargs)`` (and for
        ``redis.RedisCluster.from_url``)."""
        kwargs: dict[str, Any] = {
            "socket_connect_timeout": self.socket_connect_timeout_s,
            "socket_timeout": self.socket_timeout_s,
        }
        if self.username is not None:
            kwargs["username"] = self.username
        if self.password is not None:
            kwargs["password"] = self.password.get_secret_value()
        if self.ssl_ca_certs is not None:
            kwargs["ssl_ca_certs"] = self.ssl_ca_certs
        return kwargs


class CodecSettings(StrictSettings):
    """``DSH_CODEC_NATIVE``: ``auto`` decodes with the Cython build of the codec's readers
    when it is built (``schemas/native.py``; the image always builds it, ``make setup`` does
    when Cython is installed), ``off`` with the Python ones it is built from (the same values;
    to compare, or to rule the build out). The process logs which it runs at its first decode
    (``schemas.native``: "codec readers: …")."""

    model_config = SettingsConfigDict(env_prefix="DSH_CODEC_", extra="forbid", frozen=True)

    native: Literal["auto", "off"] = "auto"
    """`auto`: decode with the compiled readers when `make setup` built them; `off`: with the
    Python readers they are built from (the same values, slower)."""


def settings_error(exc: pydantic.ValidationError) -> ConfigError | None:
    """A settings class's refusal as the error naming the variables (never their values: one
    may be a secret); None when ``exc`` is not about one of our settings classes."""
    prefixes = {c.__name__: c.model_config.get("env_prefix", "") for c in _settings_classes()}
    prefix = prefixes.get(exc.title)
    if prefix is None:
        return None
    problems = "; ".join(
        f"{prefix}{'_'.join(str(part) for part in e['loc']).upper()}: {e['msg']}"
        for e in exc.errors(include_input=False, include_url=False)
    )
    return ConfigError(problems, code="BAD_SETTING")


def _settings_classes() -> list[type[StrictSettings]]:
    found, todo = [], list(StrictSettings.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def configure_codec() -> CodecSettings:
    """Apply the codec settings to this process; called by the CLI before any command."""
    from schemas import native

    try:
        settings = CodecSettings()
    except pydantic.ValidationError as exc:
        raise ConfigError(f"codec settings: {exc}", code="BAD_CODEC_SETTING") from None
    native.configure(settings.native == "auto")
    return settings


def _redis_url_database(url: str) -> int:
    """The database a Redis URL names, as redis-py reads it (``?db=`` before the path)."""
    from redis.connection import parse_url

    return int(parse_url(url).get("db", 0))  # type: ignore[no-untyped-call]


def _redis_url_problem(url: str) -> str | None:
    """What redis-py would refuse in ``url`` (it raises at the first connection, quoting it),
    said without any part of the URL; ``None`` when it parses."""
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            return "it must start with redis://, rediss:// or unix://"
        if parts.scheme != "unix":
            _ = parts.port  # raises for a port that is not a number, or out of range
            database = parts.path.replace("/", "")
            if database and not database.isdigit():
                return "the database (the path after the host) is not a number"
        for value in parse_qs(parts.query).get("db", []):
            if not value.isdigit():
                return "the db parameter is not a number"
    except ValueError:
        return "its port is not a number from 0 to 65535"
    return None
