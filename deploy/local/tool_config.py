"""Kafka's own command-line tools reach a secured cluster through a client properties file
(their ``--command-config``): the pipeline's ``DSH_KAFKA_*`` security settings, written as the
Java client's settings, to a file only this user can read, for the tool's run only."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from servicekit.settings import KafkaSettings

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# The flag each tool reads its client properties file from.
_CONFIG_FLAGS = {"console-consumer": "--consumer.config"}
_DEFAULT_CONFIG_FLAG = "--command-config"
_PROPERTIES_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def config_flag(tool: str) -> str:
    return _CONFIG_FLAGS.get(tool, _DEFAULT_CONFIG_FLAG)


def java_client_properties(settings: KafkaSettings) -> dict[str, str]:
    """What librdkafka's settings of ``settings`` are to Kafka's Java client. The CA and the
    client certificate are PEM files, which the Java client reads as PEM stores; its PEM key
    store takes a PKCS#8 key (``BEGIN PRIVATE KEY`` or ``BEGIN ENCRYPTED PRIVATE KEY``)."""
    props: dict[str, str] = {"security.protocol": settings.security_protocol}
    if settings.sasl_mechanism is not None:
        password = settings.sasl_password.get_secret_value() if settings.sasl_password else ""
        props["sasl.mechanism"] = settings.sasl_mechanism
        props["sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[settings.sasl_mechanism]} required "
            f'username="{_jaas_quoted(settings.sasl_username or "")}" '
            f'password="{_jaas_quoted(password)}";'
        )
    if settings.ssl_ca_location is not None:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = settings.ssl_ca_location
    if settings.ssl_certificate_location is not None and settings.ssl_key_location is not None:
        # (KafkaSettings takes the two together or neither.)
        props["ssl.keystore.type"] = "PEM"
        props["ssl.keystore.certificate.chain"] = Path(
            settings.ssl_certificate_location
        ).read_text()
        props["ssl.keystore.key"] = Path(settings.ssl_key_location).read_text()
        if settings.ssl_key_password is not None:
            props["ssl.key.password"] = settings.ssl_key_password.get_secret_value()
    return props


@contextmanager
def client_properties_file(props: Mapping[str, str]) -> Iterator[Path]:
    """``props`` in a ``.properties`` file readable by this user only, removed afterwards."""
    fd, name = tempfile.mkstemp(prefix="dsh-kafka-tool-", suffix=".properties")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.writelines(f"{_escaped(k, key=True)}={_escaped(v)}\n" for k, v in props.items())
        yield Path(name)
    finally:
        os.unlink(name)


def _jaas_quoted(value: str) -> str:
    """Inside a JAAS quoted string (Java's ``StreamTokenizer``): a line break would end it."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"}
    return "".join(escapes.get(char, char) for char in value)


def _escaped(text: str, *, key: bool = False) -> str:
    """As ``java.util.Properties.store`` writes it: ISO 8859-1 with ``\\uXXXX`` escapes (UTF-16
    units), and the characters the format gives a meaning escaped."""
    out = []
    for i, char in enumerate(text):
        if char in _PROPERTIES_ESCAPES:
            out.append(_PROPERTIES_ESCAPES[char])
        elif char in "=:#!" or (char == " " and (key or i == 0)):
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            units = char.encode("utf-16-be")
            out += [f"\\u{units[j : j + 2].hex()}" for j in range(0, len(units), 2)]
    return "".join(out)
