"""Our session placement equals what Kafka clients compute (librdkafka's murmur2_random)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from servicekit.partitioning import PRODUCER_PARTITIONER, partition_for
from servicekit.settings import KafkaSettings
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


def test_misaligned_topics_are_refused_by_topic_creation_and_by_the_writer(
    kafka_settings: KafkaSettings,
) -> None:
    """A session lives on partition p of commands, events and snapshots alike; topics that
    differ in partition count would split it, so neither `ensure_topics` nor a writer goes on."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    from producers.writer import Writer
    from servicekit.settings import ConfigError
    from servicekit.topics import TopicError, ensure_topics
    from tests.integration.writer_support import writer_settings

    admin = AdminClient(kafka_settings.client_config())
    events = kafka_settings.topic("events")
    created = admin.create_topics([NewTopic(events, TEST_PARTITIONS + 1, 1)])
    created[events].result(30)

    with pytest.raises(TopicError) as refused:
        ensure_topics(kafka_settings, TEST_PARTITIONS)
    assert refused.value.code == "PARTITION_MISMATCH"
    assert events in str(refused.value)

    # The others as they should be; the writer still sees the events topic's extra partition.
    # If the cluster's listing had not yet shown the events topic, ensure_topics created the
    # others before it found the mismatch (CI at 5acf73e), so they may exist already.
    others = [
        NewTopic(kafka_settings.topic(name), TEST_PARTITIONS, 1)
        for name in ("commands", "replies", "snapshots", "dlq")
    ]
    for future in admin.create_topics(others).values():
        try:
            future.result(30)
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(ConfigError) as stopped:
        Writer(kafka_settings, writer_settings()).run()
    assert stopped.value.code == "PARTITION_MISMATCH"
