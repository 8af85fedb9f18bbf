"""A local Kafka cluster that also speaks SASL/SCRAM-SHA-512, for security tests and for
trying the services' ``DSH_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT`` settings locally.

Each node keeps its PLAINTEXT listener (the operator's loopback door: its principal is
``User:ANONYMOUS``, a super user) and gains a ``SASL_PLAINTEXT`` listener on ``sasl_port + i``.
The SCRAM credentials are written into the KRaft metadata log when the storage is formatted
(``kafka-storage format --add-scram``), so no password is ever in a properties file. With
``acls=True`` the StandardAuthorizer is on: a SASL user may do only what an ACL grants it,
except the ``super_users`` (e.g. the services' own principal).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import SecretStr

from deploy.local.errors import LocalStackError
from deploy.local.kafka import ExtraListenerCluster, KafkaNode
from deploy.local.settings import LocalStackSettings

MECHANISM = "SCRAM-SHA-512"


class SaslKafkaCluster(ExtraListenerCluster):
    protocol = "SASL_PLAINTEXT"
    label = "SASL"

    def __init__(
        self,
        settings: LocalStackSettings,
        *,
        sasl_port: int,
        users: Mapping[str, SecretStr],
        acls: bool = False,
        super_users: Sequence[str] = (),
    ) -> None:
        super().__init__(settings, sasl_port)
        if not users:
            raise LocalStackError("a SASL listener needs at least one SCRAM user")
        self.users = dict(users)
        self.acls = acls
        self.super_users = tuple(super_users)

    def _listener_settings(self, node: KafkaNode) -> list[str]:
        lines = [
            f"sasl.enabled.mechanisms={MECHANISM}",
            # Server side of SCRAM: credentials come from the metadata log, none here.
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        ]
        if self.acls:
            supers = ["User:ANONYMOUS", *(f"User:{u}" for u in self.super_users)]
            lines += [
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                f"super.users={';'.join(supers)}",
                "allow.everyone.if.no.acl.found=false",
            ]
        return lines

    def _format(self, node: KafkaNode, libs: Path, cluster_id: str) -> None:
        scram: list[str] = []
        for name, password in self.users.items():
            secret = password.get_secret_value()
            if any(c in name + secret for c in '",[]='):
                raise LocalStackError(f'SCRAM user {name!r}: name or password has [ ] , = or "')
            scram += ["--add-scram", f"{MECHANISM}=[name={name},password={secret}]"]
        argv = self._format_argv(node, libs, cluster_id, scram)
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            output = result.stdout + result.stderr
            for password in self.users.values():
                output = output.replace(password.get_secret_value(), "**********")
            raise LocalStackError(
                f"formatting Kafka storage for node {node.node_id} failed:\n{output}",
                code="FORMAT_FAILED",
            )
