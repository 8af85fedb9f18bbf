"""ensure_topics returns only once created topics are led: the wait, against scripted metadata."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin._metadata import (  # the stubs do not re-export them
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)

from servicekit.topics import TopicError, _wait_until_led


def _topic(name: str, leaders: list[int]) -> TopicMetadata:
    topic = TopicMetadata()
    topic.topic = name
    for number, leader in enumerate(leaders):
        partition = PartitionMetadata()
        partition.id = number
        partition.leader = leader
        topic.partitions[number] = partition
    return topic


class _ScriptedAdmin:
    """Answers list_topics with one cluster view after another, then keeps the last; None
    stands for a call that timed out."""

    def __init__(self, *views: dict[str, TopicMetadata] | None) -> None:
        self.views = list(views)
        self.calls = 0

    def list_topics(self, timeout: float) -> ClusterMetadata:
        view = self.views[min(self.calls, len(self.views) - 1)]
        self.calls += 1
        if view is None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        metadata = ClusterMetadata()
        metadata.topics = view
        return metadata


def test_waits_through_a_missing_topic_a_leaderless_partition_and_a_timeout() -> None:
    admin = _ScriptedAdmin(
        {},
        {"events": _topic("events", [1, -1])},
        None,
        {"events": _topic("events", [1, 2])},
    )
    _wait_until_led(admin, ["events"], partitions=2, timeout_s=5)
    assert admin.calls == 4


def test_a_topic_never_led_is_a_typed_error_naming_it() -> None:
    admin = _ScriptedAdmin({"events": _topic("events", [-1])})
    with pytest.raises(TopicError) as raised:
        _wait_until_led(admin, ["events"], partitions=1, timeout_s=0.3)
    assert raised.value.code == "NOT_LED"
    assert "events" in str(raised.value)


def test_a_topic_created_elsewhere_with_another_count_is_a_mismatch_not_a_wait() -> None:
    """The listing missed a topic another process had just created, so our creation got
    TOPIC_ALREADY_EXISTS; its partition count is only seen while waiting (CI at 5acf73e)."""
    admin = _ScriptedAdmin({}, {"events": _topic("events", [1, 1, 1])})
    with pytest.raises(TopicError) as raised:
        _wait_until_led(admin, ["events"], partitions=2, timeout_s=5)
    assert raised.value.code == "PARTITION_MISMATCH"
    assert "events has 3 partitions, expected 2" in str(raised.value)
    assert admin.calls == 2
