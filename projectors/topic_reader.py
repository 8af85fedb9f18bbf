"""Read sessions back from the events topic (read_committed), for rebuilds and ``dsh verify``.

A session lives on one partition (``partition_for``); reading it means scanning that partition
from the start and keeping the records keyed by it. Rebuilds batch every session of a
partition into one scan.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from deploy.config import KafkaSettings
from deploy.topics import fetched, partition_for
from projectors.records import Poison, Record, decode


def partition_count(kafka: KafkaSettings, topic: str, timeout_s: float = 10.0) -> int:
    consumer = Consumer({**kafka.client_config(), "group.id": f"dsh-reader-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        return len(metadata.topics[topic].partitions)
    finally:
        consumer.close()


def scan_partition(
    kafka: KafkaSettings, topic: str, partition: int, timeout_s: float = 30.0
) -> Iterator[Record | Poison]:
    """Every committed record of one partition, up to its end as of now."""
    return scan_partitions(kafka, topic, [partition], timeout_s)


def scan_partitions(
    kafka: KafkaSettings,
    topic: str,
    partitions: Iterable[int],
    timeout_s: float = 30.0,
    on_end: Callable[[int, int], None] | None = None,
    start: Mapping[int, int] | None = None,
) -> Iterator[Record | Poison]:
    """Every committed record of the given partitions up to their ends as of now, through one
    consumer (setting one up costs more than reading thousands of records), from each one's
    ``start`` offset if given, else its first. Records of one partition come in order;
    partitions interleave; ``on_end(p, end)`` runs when p's end is reached, with the offset
    the next record will have."""
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": f"dsh-reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            # A start offset deleted by retention meanwhile: the earliest left, not the end.
            "auto.offset.reset": "earliest",
        }
    )
    pending = set(partitions)
    try:
        # From each partition's low watermark as a number: with OFFSET_BEGINNING librdkafka
        # takes about half a second to fetch the first record.
        starts = start or {}
        consumer.assign(
            [
                TopicPartition(
                    topic, p, starts[p] if p in starts else _first_offset(consumer, topic, p)
                )
                for p in pending
            ]
        )
        deadline = time.monotonic() + timeout_s
        while pending:
            batch = fetched(consumer, 1000, 0.1)
            if not batch:
                if time.monotonic() > deadline:
                    raise KafkaException(f"no end of {topic}{sorted(pending)} in {timeout_s}s")
                continue
            deadline = time.monotonic() + timeout_s
            for message in batch:
                error = message.error()
                p = message.partition() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if p in pending:
                            pending.discard(p)
                            if on_end is not None:
                                on_end(p, message.offset() or 0)
                        continue
                    raise KafkaException(error)
                if p in pending:
                    yield decode(message.key(), message.value(), p, message.offset() or 0)
    finally:
        consumer.close()


def _first_offset(consumer: Consumer, topic: str, partition: int) -> int:
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    except KafkaException:
        return OFFSET_BEGINNING
    return int(low) if low >= 0 else OFFSET_BEGINNING


def read_sessions(
    kafka: KafkaSettings, topic: str, partition: int, session_ids: Collection[str]
) -> dict[str, list[Record | Poison]]:
    wanted = set(session_ids)
    out: dict[str, list[Record | Poison]] = {sid: [] for sid in wanted}
    for item in scan_partition(kafka, topic, partition):
        if item.session_id in wanted:
            out[item.session_id].append(item)
    return out


def read_session(
    kafka: KafkaSettings, session_id: str, topic: str | None = None
) -> list[Record | Poison]:
    topic = topic or kafka.topic("events")
    partition = partition_for(session_id, partition_count(kafka, topic))
    return read_sessions(kafka, topic, partition, [session_id])[session_id]
