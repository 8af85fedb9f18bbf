"""The real servers work as the design needs them to: transactions, read_committed, Redis."""

from __future__ import annotations

import time
import uuid

import redis
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from servicekit.settings import KafkaSettings


def _consume_all(settings: KafkaSettings, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            **settings.client_config(),
            "group.id": f"smoke-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            values.append(message.value() or b"")
        # Keep polling briefly: anything beyond `expected` (e.g. aborted records) must not show.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


def test_transactional_produce_is_visible_to_read_committed_only_once_committed(
    topics: KafkaSettings,
) -> None:
    topic = topics.topic("events")
    producer = Producer(
        {
            **topics.client_config(),
            "transactional.id": f"smoke-{uuid.uuid4().hex}",
            "retry.backoff.ms": 5,
        }
    )
    producer.init_transactions(30)

    producer.begin_transaction()
    producer.produce(topic, key=b"s1", value=b"committed-1", partition=0)
    producer.produce(topic, key=b"s1", value=b"committed-2", partition=0)
    producer.commit_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, key=b"s1", value=b"aborted", partition=0)
    producer.flush(10)
    producer.abort_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, key=b"s1", value=b"committed-3", partition=0)
    producer.commit_transaction(30)

    assert _consume_all(topics, topic, expected=3) == [
        b"committed-1",
        b"committed-2",
        b"committed-3",
    ]


def test_redis_round_trip_and_lua(redis_client: redis.Redis) -> None:
    key = "{smoke}:value"
    redis_client.set(key, "v1")
    assert redis_client.get(key) == b"v1"
    # Lua is how the projectors apply an event atomically; prove the server runs scripts.
    bump = redis_client.register_script(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then"
        " return redis.call('SET', KEYS[1], ARGV[2]) end return false"
    )
    assert bump(keys=[key], args=["v1", "v2"]) == b"OK"
    assert bump(keys=[key], args=["v1", "v3"]) is None
    assert redis_client.get(key) == b"v2"
