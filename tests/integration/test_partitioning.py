"""Our session placement equals what Kafka clients compute (librdkafka's murmur2_random)."""

from __future__ import annotations

from confluent_kafka import Message, Producer

from deploy.config import KafkaSettings
from deploy.topics import PRODUCER_PARTITIONER, partition_for
from tests.conftest import TEST_PARTITIONS

KEYS = ["", "a", "ab", "abc", "abcd", "sess-1", "session/ünïcode", "x" * 101, "🙂" * 7]


def test_partition_for_matches_the_client_partitioner(topics: KafkaSettings) -> None:
    producer = Producer({**topics.client_config(), **PRODUCER_PARTITIONER})
    placed: dict[str, int] = {}

    def record(err: object, message: Message) -> None:
        assert err is None
        key = message.key()
        assert key is not None
        placed[key.decode()] = message.partition() or 0

    for key in KEYS[1:]:  # an empty key is placed at random by librdkafka, so it is not compared
        producer.produce(topics.topic("events"), key=key.encode(), value=b"v", on_delivery=record)
    assert producer.flush(30) == 0
    assert placed == {key: partition_for(key, TEST_PARTITIONS) for key in KEYS[1:]}
    assert len(set(placed.values())) > 1  # the keys really spread over partitions
