"""A transaction's records go to librdkafka's queue, which a large batch can fill
(producers/writer/transaction.py): the writer waits for the brokers to take what is queued
instead of failing with ``BufferError``. Against a real broker:
tests/integration/test_writer_batching.py."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from producers.writer.journal import REPLY
from producers.writer.transaction import Transaction


class QueueOf:
    """A producer whose queue holds ``room`` records until flushed; ``drains``: whether a
    flush empties it (the brokers answer)."""

    def __init__(self, room: int, drains: bool = True) -> None:
        self.room, self.drains = room, drains
        self.queued: list[Any] = []
        self.delivered: list[Any] = []
        self.flushes = 0

    def produce(self, topic: str, **record: Any) -> None:
        if len(self.queued) >= self.room:
            raise BufferError("Local: Queue full")
        self.queued.append(record["value"])

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        if self.drains:
            self.delivered += self.queued
            self.queued = []
        return len(self.queued)


def _put(txn: Transaction, n: int) -> None:
    for i in range(n):
        txn.put(0, "replies", f"v{i}".encode(), b"k", 0, REPLY, b"r")


def test_a_full_queue_waits_for_the_brokers_and_every_record_goes_out_in_order() -> None:
    producer = QueueOf(room=3)
    txn = Transaction(0, producer)  # type: ignore[arg-type]
    _put(txn, 10)
    assert producer.flushes == 3
    assert producer.delivered + producer.queued == [f"v{i}".encode() for i in range(10)]
    assert len(txn.journal) == 10 * 7


def test_a_queue_the_brokers_do_not_drain_is_a_kafka_failure_the_writer_recovers_from() -> None:
    txn = Transaction(0, QueueOf(room=2, drains=False))  # type: ignore[arg-type]
    with pytest.raises(KafkaException) as failed:
        _put(txn, 3)
    assert failed.value.args[0].code() == KafkaError._QUEUE_FULL
