"""The Kafka topics of CONTRACT §6, their settings, and idempotent creation."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from deploy.config import ConfigError, KafkaSettings
from dsh.errors import SessionError, register_error

_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
_ONE_WEEK_MS = str(7 * 24 * 3600 * 1000)
_ONE_DAY_MS = str(24 * 3600 * 1000)
_ONE_HOUR_MS = str(3600 * 1000)


@register_error
class TopicError(SessionError):
    default_code = "TOPIC"


@dataclass(frozen=True)
class TopicSpec:
    name: str  # without the configurable prefix
    config: dict[str, str] = field(default_factory=dict)


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
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    if partitions < 1:
        raise ConfigError(f"partitions must be at least 1, got {partitions}")
    admin = AdminClient(kafka.client_config())
    existing = admin.list_topics(timeout=timeout_s).topics
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


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as a signed int32."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    h = (seed ^ length) & 0xFFFFFFFF
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(session_id: str, partitions: int) -> int:
    """The partition of a session on every keyed topic, as Java's default partitioner places it.

    librdkafka's ``murmur2_random`` partitioner computes the same, so Python, Java and other
    clients configured for Kafka's default agree on where a session lives.
    """
    return (murmur2(session_id.encode()) & 0x7FFFFFFF) % partitions


def partition_ids(partitions: Iterable[TopicPartition]) -> list[int]:
    """The partition numbers of a rebalance callback's list, sorted: what a log line shows."""
    return sorted(tp.partition for tp in partitions)


# Producers that publish keyed records must place them as Java clients do.
PRODUCER_PARTITIONER = {"partitioner": "murmur2_random"}

# How long a tailing consumer's fetch may wait at the broker for records. Records (and, for
# read_committed, the markers that make them visible) complete a waiting fetch at once, so a
# long wait costs no latency; a short one makes the broker answer an empty fetch every few
# ms for every idle consumer (bench/idle_fetch_bench.py: two idle consumers cost the broker
# 13-36 % of a core at 5 ms, under 1 % at 500 ms). Readers that detect the end of a partition keep a
# short wait of their own: there the wait is the delay before "end of partition" is reported.
TAIL_FETCH_WAIT = {"fetch.wait.max.ms": 500}


def fetched(consumer: Consumer, max_records: int, wait_s: float) -> list[Message]:
    """Up to ``max_records`` records (and events) the consumer has already fetched, without
    waiting; on an empty queue, the first one to come within ``wait_s``. ``consume(n, t)``
    returns only once it has n or t has passed, so a reader to the end of a partition, whose
    tail never fills the batch, waited out all of t there (200 ms in every restore)."""
    batch = consumer.consume(max_records, 0)
    if batch:
        return batch
    first = consumer.poll(wait_s)
    return [first] if first is not None else []
