"""The Kafka topics of CONTRACT §6: their names and settings, idempotent creation, and the one
start-up check every service and command makes (the topics are there, with how many
partitions)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from dsh.errors import SessionError, register_error
from servicekit import kafka_clients
from servicekit.kafka_errors import KafkaAuthenticationError, KafkaTlsError, KafkaUnreachableError
from servicekit.settings import ConfigError, KafkaSettings

_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
_ONE_WEEK_MS = str(7 * 24 * 3600 * 1000)
_ONE_DAY_MS = str(24 * 3600 * 1000)
_ONE_HOUR_MS = str(3600 * 1000)


@register_error
class TopicError(SessionError):
    """``TOPIC_MISSING``, ``PARTITION_MISMATCH``, ``CREATE_FAILED`` or ``NOT_LED``."""

    default_code = "TOPIC"


@dataclass(frozen=True)
class TopicSpec:
    name: str  # without the configurable prefix
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Topics:
    """The topic names of one deployment (``DSH_KAFKA_TOPIC_PREFIX``)."""

    commands: str
    events: str
    replies: str
    snapshots: str
    dlq: str

    @classmethod
    def of(cls, kafka: KafkaSettings) -> Topics:
        return cls(*(kafka.topic(n) for n in ("commands", "events", "replies", "snapshots", "dlq")))


# Commands and events must have the same partition count: partition p of one maps to
# partition p of the other, which is what lets one writer own a session on both.
TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("commands", {"retention.ms": _ONE_WEEK_MS}),
    TopicSpec("events", dict(_FOREVER)),  # the source of truth: never expires
    TopicSpec("replies", {"retention.ms": _ONE_DAY_MS}),
    # The log cleaner never touches a partition's active segment, which rolls only at 1 GiB or
    # after 7 days by default: until then every snapshot a session ever had stays, each with
    # all its events so far, and a restore reads them all. The lag rolls it within the hour.
    TopicSpec("snapshots", {"cleanup.policy": "compact", "max.compaction.lag.ms": _ONE_HOUR_MS}),
    TopicSpec("dlq", dict(_FOREVER)),
)


def ensure_topics(
    kafka: KafkaSettings,
    partitions: int,
    replication_factor: int = -1,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create the missing topics; refuse existing ones whose partition count differs.

    ``replication_factor=-1`` takes the broker's ``default.replication.factor``.
    Returns the names of the topics created, once the cluster's metadata shows each of them
    with a leader for every partition: the controller acknowledges a creation before the
    brokers have applied it, and a service started right after (``dsh up --services``) would
    otherwise find its topic missing.
    """
    from confluent_kafka.cimpl import NewTopic

    if partitions < 1:
        raise ConfigError(f"partitions must be at least 1, got {partitions}")
    # Typed: a refused login or certificate at once, no broker KAFKA_UNREACHABLE. Its own
    # client, so that an error raised holds none (see cluster_topics).
    existing = cluster_topics(kafka, timeout_s)
    admin = kafka_clients.admin(kafka)
    missing = []
    for spec in TOPICS:
        name = kafka.topic(spec.name)
        if name in existing:
            count = len(existing[name].partitions)
            if count != partitions:
                raise _misaligned(name, count, partitions)
            continue
        missing.append(NewTopic(name, partitions, replication_factor, config=dict(spec.config)))
    if not missing:
        return []
    futures = admin.create_topics(missing, operation_timeout=timeout_s, request_timeout=timeout_s)
    created = []
    for name, future in futures.items():
        try:
            future.result()
        except Exception as exc:
            # Another process may have created it between our listing and our request.
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise TopicError(
                    f"creating topic {name} failed: {exc}", code="CREATE_FAILED"
                ) from exc
        else:
            created.append(name)
    _wait_until_led(admin, [t.topic for t in missing], partitions, timeout_s)
    return created


def _wait_until_led(admin: Any, names: list[str], partitions: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            topics = admin.list_topics(timeout=max(0.5, deadline - time.monotonic())).topics
        except KafkaException:
            topics = {}  # no answer in time: the deadline below decides
        waiting = [name for name in names if not _led(name, topics.get(name), partitions)]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise TopicError(
                f"topics {', '.join(waiting)} were created but the cluster did not show a leader "
                f"for each of their {partitions} partitions within {timeout_s:g} s",
                code="NOT_LED",
            )
        time.sleep(0.1)


def _misaligned(name: str, count: int, partitions: int) -> TopicError:
    return TopicError(
        f"topic {name} has {count} partitions, expected {partitions}; commands and "
        "events must be partition-aligned",
        code="PARTITION_MISMATCH",
    )


def _led(name: str, topic: Any, partitions: int) -> bool:
    """Whether the metadata shows ``topic`` with a leader on each of its partitions.

    A topic someone else created between our listing and our request (ours then got
    TOPIC_ALREADY_EXISTS) may have any count, and would never be led as ours: it is refused.
    KRaft applies a topic and its partitions in one batch, so a count seen is the whole count.
    """
    if topic is None or topic.error is not None or not topic.partitions:
        return False
    if len(topic.partitions) != partitions:
        raise _misaligned(name, len(topic.partitions), partitions)
    return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())


def partition_counts(
    kafka: KafkaSettings,
    topics: Sequence[str],
    timeout_s: float = 30.0,
    *,
    appear_s: float = 0.0,
    quiet: bool = False,
    admin: AdminClient | None = None,
) -> dict[str, int]:
    """The partition count of each of ``topics`` (full names): the start-up check of every
    service and command (:func:`topic_metadata`)."""
    found = topic_metadata(kafka, topics, timeout_s, appear_s=appear_s, quiet=quiet, admin=admin)
    return {t: len(m.partitions) for t, m in found.items()}


def topic_metadata(
    kafka: KafkaSettings,
    topics: Sequence[str],
    timeout_s: float = 30.0,
    *,
    appear_s: float = 0.0,
    quiet: bool = False,
    admin: AdminClient | None = None,
) -> dict[str, Any]:
    """The metadata of each of ``topics`` (full names; name -> TopicMetadata), the start-up
    check. A refused login or certificate fails at once (typed, see :func:`cluster_topics`), no
    broker in ``timeout_s`` is ``KAFKA_UNREACHABLE`` and a topic that is not there
    ``TOPIC_MISSING``, both naming the fix.

    ``appear_s``: topics created a moment ago may not be in every broker's metadata yet (the
    controller answers CreateTopics before the brokers have applied it), so missing ones are
    asked for again for that long before they count as missing.

    ``admin``: a client kept for repeated checks (a readiness probe), instead of a new one,
    with its connections and login, each time."""
    deadline = time.monotonic() + appear_s
    while True:
        found = cluster_topics(kafka, timeout_s, quiet=quiet, admin=admin)
        missing = [t for t in topics if t not in found]
        if not missing:
            return {t: found[t] for t in topics}
        if time.monotonic() >= deadline:
            raise TopicError(
                f"topic(s) {', '.join(missing)} missing on {kafka.bootstrap_servers}; `dsh up` "
                "creates them on a local stack (check DSH_KAFKA_TOPIC_PREFIX)",
                code="TOPIC_MISSING",
            )
        time.sleep(0.2)


def leading_brokers(topic: Any) -> int:
    """How many brokers lead partitions of ``topic`` (its TopicMetadata): a consumer of all
    its partitions has a fetch in flight to each. A partition without a leader at the moment
    (its broker restarting) counts for none."""
    return len({p.leader for p in topic.partitions.values() if p.leader >= 0})


def cluster_topics(
    kafka: KafkaSettings,
    timeout_s: float,
    *,
    quiet: bool = False,
    admin: AdminClient | None = None,
) -> dict[str, Any]:
    """Topic metadata of the cluster (name -> TopicMetadata). Serves the client's callbacks
    while it waits: a refused login raises ``KafkaAuthenticationError`` and a broker
    certificate that fails verification ``KafkaTlsError`` at once, no answer at all
    ``KafkaUnreachableError`` after ``timeout_s``.

    The client is polled and the error raised outside the ``except`` block, so the error has
    no ``__context__``: the KafkaException's traceback holds the admin client's frames, and a
    client kept alive by an error the caller holds goes on retrying its broker, logging, for
    as long as the error is held. A caller's own ``admin`` (made with
    ``kafka_clients.admin``) is used instead of a new one and kept."""
    if admin is None:
        admin = kafka_clients.admin(kafka, quiet=quiet)
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
                f"no Kafka broker of {kafka.bootstrap_servers} answered in {timeout_s:g}s "
                f"({reason}); is Kafka running? `dsh up` starts a local one (or set "
                "DSH_KAFKA_BOOTSTRAP_SERVERS)"
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
