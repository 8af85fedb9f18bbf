"""A local Kafka cluster that also speaks TLS, for tests and for trying the services'
``DSH_KAFKA_SECURITY_PROTOCOL=SSL`` settings locally.

Each node keeps its PLAINTEXT listener (the operator's loopback door) and gains an ``SSL``
listener on ``ssl_port + i`` whose certificate a throwaway CA signed for 127.0.0.1 and
localhost. Clients verify the broker (``DSH_KAFKA_SSL_CA_LOCATION`` = the CA's PEM); the broker
does not ask for client certificates. Keys and certificates are PEM files made with the
``openssl`` command line, which Debian installs with ca-certificates.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from deploy.local.errors import LocalStackError
from deploy.local.kafka import ExtraListenerCluster, KafkaNode
from deploy.local.settings import LocalStackSettings


@dataclass(frozen=True)
class LocalCa:
    """A CA and a server certificate it signed, as PEM files in one directory."""

    ca_cert: Path
    server_cert: Path
    server_key: Path  # unencrypted PKCS#8, as Kafka's PEM key store takes it without a password


def make_test_ca(directory: Path, name: str = "dsh-test-ca") -> LocalCa:
    """A fresh CA under ``directory`` and a certificate for 127.0.0.1/localhost it signed."""
    if shutil.which("openssl") is None:
        raise LocalStackError("the openssl command is needed to make test certificates")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    extensions = directory / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", f"/CN={name}", "-keyout", ca_key, "-out", ca_cert],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
         "-days", "2", "-extfile", extensions, "-out", cert],
    ]  # fmt: skip
    for args in steps:
        result = subprocess.run(
            ["openssl", *map(str, args)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise LocalStackError(f"openssl {args[0]} failed:\n{result.stderr}")
    return LocalCa(ca_cert=ca_cert, server_cert=cert, server_key=key)


class TlsKafkaCluster(ExtraListenerCluster):
    protocol = "SSL"
    label = "TLS"

    def __init__(self, settings: LocalStackSettings, *, ssl_port: int, ca: LocalCa) -> None:
        super().__init__(settings, ssl_port)
        self.ca = ca

    def _listener_settings(self, node: KafkaNode) -> list[str]:
        # The key store is one PEM file: the private key, then the certificate chain.
        store = node.home / "ssl-keystore.pem"
        store.write_text(self.ca.server_key.read_text() + self.ca.server_cert.read_text())
        return [
            "listener.name.ssl.ssl.keystore.type=PEM",
            f"listener.name.ssl.ssl.keystore.location={store}",
        ]
