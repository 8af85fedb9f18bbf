"""Create the contract's Kafka topics (``servicekit/topics.py``); the topic job's program.

Run as ``python -m deploy.k8s.create_topics`` in the service image (the package ships this
module) by the ``topics`` Job of ``deploy/k8s`` and the ``topics`` service of
``deploy/compose``, so the topic names and configs are the image's own
``servicekit.topics.TOPICS``, the same as ``dsh up`` creates. Safe to
run again: existing topics are kept, and one whose partition count differs is an error
(commands and events must be partition-aligned).

Environment: ``DSH_KAFKA_*`` (how to reach Kafka, SASL/TLS included) and three variables
deliberately outside every ``DSH_<PREFIX>_`` namespace, since they belong to no service:
``TOPIC_PARTITIONS`` (required), ``TOPIC_REPLICATION_FACTOR`` (default -1: the broker's
default) and ``TOPIC_MIN_INSYNC_REPLICAS`` (optional; set on every topic, new or existing).
"""

from __future__ import annotations

import os
import sys

from dsh.errors import SessionError
from servicekit.settings import KafkaSettings
from servicekit.topics import TOPICS, ensure_topics


def set_min_insync_replicas(kafka: KafkaSettings, value: str, timeout_s: float) -> None:
    """Pin ``min.insync.replicas`` per topic rather than trust the broker default.

    With replication factor 3 and acks=all, 2 is what makes a committed event survive the
    loss of any one broker while a single broker outage still accepts writes.
    """
    # Public names that confluent_kafka.admin re-exports without __all__, which strict
    # mypy (no implicit re-export) refuses; they are its documented import path.
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient(kafka.client_config())
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            kafka.topic(spec.name),
            incremental_configs=[
                ConfigEntry(
                    "min.insync.replicas", value, incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
        for spec in TOPICS
    ]
    for resource, future in admin.incremental_alter_configs(
        resources, request_timeout=timeout_s
    ).items():
        future.result()
        print(f"{resource.name}: min.insync.replicas={value}", flush=True)


def main() -> int:
    timeout_s = 60.0
    kafka = KafkaSettings()
    partitions = int(os.environ["TOPIC_PARTITIONS"])
    replication_factor = int(os.environ.get("TOPIC_REPLICATION_FACTOR", "-1"))
    created = ensure_topics(kafka, partitions, replication_factor, timeout_s=timeout_s)
    for name in created:
        print(f"created {name} ({partitions} partitions, replication {replication_factor})")
    existing = sorted({kafka.topic(spec.name) for spec in TOPICS} - set(created))
    for name in existing:
        print(f"kept {name}")
    min_isr = os.environ.get("TOPIC_MIN_INSYNC_REPLICAS", "")
    if min_isr:
        set_min_insync_replicas(kafka, min_isr, timeout_s)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SessionError as exc:
        # The job's log should say what to fix (e.g. a partition mismatch), not a traceback.
        print(f"create_topics: error [{exc.code}]: {exc.message}", file=sys.stderr)
        sys.exit(1)
