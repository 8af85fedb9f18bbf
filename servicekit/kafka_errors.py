"""Kafka failures that waiting does not cure, as typed errors with stable codes, raised at once.

librdkafka retries everything itself and reports trouble through its ``error_cb``, served by
``poll``/``consume``/``flush``; a blocking call such as ``list_topics`` only says "Broker
transport failure" once its timeout is over. Every client built from
``KafkaSettings.client_config()`` gets :class:`FailFast` as its ``error_cb``: a refused login
raises :class:`KafkaAuthenticationError`, a broker certificate that fails verification
:class:`KafkaTlsError`, out of the next poll of that client, and
:func:`servicekit.topics.cluster_topics` (the start-up metadata call of every service and
command) polls while it waits, so a wrong password or CA file fails a start within a second or
two, not after 30 s. Messages name the user, mechanism, CA file and servers, never a secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError

from dsh.errors import SessionError, register_error

if TYPE_CHECKING:
    pass


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
    """No broker answered within the start-up timeout (all brokers down, wrong address). The
    message names the servers and the fix."""

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
