"""Where a session lives: Kafka's default (murmur2) partitioner, as every keyed topic uses it."""

from __future__ import annotations


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


# Producers that publish keyed records must place them as Java clients do.
PRODUCER_PARTITIONER = {"partitioner": "murmur2_random"}
