"""Topics of a test's own: a fresh prefix, so no test sees another's records."""

from __future__ import annotations

import uuid

from servicekit.settings import KafkaSettings
from servicekit.topics import ensure_topics


def fresh_topics(bootstrap_servers: str, partitions: int, name: str = "test") -> KafkaSettings:
    """Settings under a new ``<name>-<random>.dsh.session`` prefix, its topics created."""
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap_servers,
        topic_prefix=f"{name}-{uuid.uuid4().hex[:12]}.dsh.session",
    )
    ensure_topics(kafka, partitions)
    return kafka
