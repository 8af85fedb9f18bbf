"""A dead letter whose delivery fails is an error at the flush before the offsets commit, not
a record dropped while its source's offset moves on. No broker: the one the producer is given
does not answer, so the record's delivery times out."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from dsh.errors import SessionError
from servicekit.dlq import DeadLetters
from servicekit.settings import KafkaSettings


def test_a_dead_letter_that_was_not_delivered_fails_the_flush() -> None:
    letters = DeadLetters(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "surface")
    letters._producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 300, "log_level": 0}
    )
    poison = SessionError("bad bytes", code="POISON_RECORD")
    letters.send(b"s-1", b"x", poison, "t.events/0@7")
    with pytest.raises(SessionError) as refused:
        letters.flush(timeout_s=10)
    assert refused.value.code == "DLQ_UNDELIVERED" and "timed out" in refused.value.message
    letters._producer = None  # nothing to deliver any more


def test_closing_with_a_dead_letter_undelivered_fails_and_still_ends_the_producer() -> None:
    letters = DeadLetters(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "surface")
    producer = letters._producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 300, "log_level": 0}
    )
    letters.send(b"s-1", b"x", SessionError("bad bytes", code="POISON_RECORD"), "t.events/0@7")
    with pytest.raises(SessionError, match="not delivered"):
        letters.close()
    assert letters._producer is None
    with pytest.raises(RuntimeError, match="closed"):  # its threads are gone
        producer.produce("t", b"x")
