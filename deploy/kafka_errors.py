"""Kafka failures that waiting does not cure, as typed errors with stable codes, raised at once.

librdkafka retries everything itself and reports trouble through its ``error_cb``, served by
``poll``/``consume``/``flush``; a blocking call such as ``list_topics`` only says "Broker
transport failure" once its timeout is over. Every client built from
``KafkaSettings.client_config()`` gets :class:`FailFast` as its ``error_cb``: a refused login
raises :class:`KafkaAuthenticationError`, a broker certificate that fails verification
:class:`KafkaTlsError`, out of the next poll of that client, and :func:`cluster_topics` (the
start-up metadata call of the writer and ``SessionClient``) polls while it waits, so a wrong
password or CA file fails a start within a second or two, not after 30 s. Messages name the
user, mechanism, CA file and servers, never a secret.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from dsh.errors import SessionError, register_error

if TYPE_CHECKING:
    from deploy.config import KafkaSettings


@register_error
class KafkaAuthenticationError(SessionError):
    """The brokers refused this client's credentials (SASL). Retrying cannot help."""

    default_code = "KAFKA_AUTHENTICATION"


@register_error
class KafkaTlsError(SessionError):
    """The broker's TLS certificate failed verification (wrong or missing CA file, a name the
    certificate does not cover, an expired certificate). Retrying cannot help."""

    default_code = "KAFKA_TLS"


@register_error
class KafkaUnreachableError(SessionError):
    """No broker answered within the start-up timeout (all brokers down, wrong address)."""

    default_code = "KAFKA_UNREACHABLE"


_AUTHENTICATION = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
# OpenSSL's reason for a chain or name check that failed, in librdkafka's _SSL error text.
_CERTIFICATE_UNVERIFIED = "certificate verify failed"


class FailFast:
    """A librdkafka ``error_cb``: raises the typed error for a refused login or a broker
    certificate that failed verification (the exception leaves the ``poll`` that served the
    callback with its type). Other errors, TLS ones included (a broker closing a connection
    mid-handshake while it restarts), librdkafka retries by itself, and logs.

    ``refused`` and ``unverified`` begin the two messages; they name the servers, the user
    and the CA file, never a secret."""

    def __init__(self, refused: str, unverified: str, secrets: Iterable[str] = ()) -> None:
        self.refused = refused
        self.unverified = unverified
        self._secrets = tuple(s for s in secrets if s)

    def __call__(self, err: KafkaError) -> None:
        if err.code() in _AUTHENTICATION:
            raise KafkaAuthenticationError(self.scrub(f"{self.refused}: {err.str()}"))
        if err.code() == KafkaError._SSL and _CERTIFICATE_UNVERIFIED in err.str():
            raise KafkaTlsError(self.scrub(f"{self.unverified}: {err.str()}"))

    def scrub(self, text: str) -> str:
        # librdkafka does not echo passwords, but a message must not carry one whatever it says.
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def cluster_topics(kafka: KafkaSettings, timeout_s: float) -> dict[str, Any]:
    """Topic metadata of the cluster (name -> TopicMetadata). Serves the client's callbacks
    while it waits: a refused login raises ``KafkaAuthenticationError`` and a broker
    certificate that fails verification ``KafkaTlsError`` at once, no answer at all
    ``KafkaUnreachableError`` after ``timeout_s``.

    The client is polled and the error raised outside the ``except`` block, so the error has
    no ``__context__``: the KafkaException's traceback holds the admin client's frames, and a
    client kept alive by an error the caller holds goes on retrying its broker, logging, for
    as long as the error is held."""
    admin = AdminClient(kafka.client_config())
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            topics: dict[str, Any] = admin.list_topics(timeout=0.5).topics
            return topics
        except KafkaException as exc:
            reason = exc.args[0].str()
        failure = _served(admin)  # the error_cb raises for a refusal
        if failure is None and time.monotonic() >= deadline:
            failure = KafkaUnreachableError(
                f"no Kafka broker of {kafka.bootstrap_servers} answered in {timeout_s:.0f}s "
                f"({reason})"
            )
        if failure is not None:
            del admin
            raise failure
        time.sleep(0.1)


def _served(admin: AdminClient) -> SessionError | None:
    try:
        admin.poll(0)
    except (KafkaAuthenticationError, KafkaTlsError) as exc:
        return exc.with_traceback(None)  # its frames would keep the client alive
    return None
