"""A transaction of the writer: the outbox a batch's records go to, and what it keeps of them.

It keeps its command offsets and every record it produced, in order (:mod:`.journal`), so
that it can be produced again when only the group's generation made it fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from producers.writer import metrics
from producers.writer.journal import FIELDS, Headers, Kind, headers_of
from producers.writer.lanes import KAFKA_TIMEOUT_S
from producers.writer.state import PartitionState, without_traceback


@dataclass(eq=False)
class Transaction:
    """A transaction being built: the open transaction's outbox. It keeps its command offsets
    and every record it produced, in order, so that it can be produced again when only the
    group's generation made it fail."""

    lane: int  # index of its producer
    producer: Producer
    offsets: dict[int, int] = field(default_factory=dict)
    journal: list[Any] = field(default_factory=list)  # FIELDS values per record
    # The in-memory state each partition's commands were applied to: a partition restored
    # since (revoked and assigned again, recovered) has another, which lacks these records.
    states: dict[int, PartitionState] = field(default_factory=dict)
    size: int = 0  # bytes of the record values produced

    def put(
        self,
        serves: int,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        kind: Kind,
        request_id: bytes | None = None,
    ) -> None:
        self.journal.extend((serves, topic, value, key, partition, kind, request_id))
        self.size += len(value or b"")
        produce(self.producer, topic, value, key, partition, headers_of(kind, request_id))

    def records(self, partitions: set[int]) -> Iterator[list[Any]]:
        """The journal's records that serve ``partitions``, in order."""
        journal = self.journal
        for i in range(0, len(journal), FIELDS):
            if journal[i] in partitions:
                yield journal[i : i + FIELDS]


def produce(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    partition: int,
    headers: Headers,
) -> None:
    """``producer.produce``, waiting for room when librdkafka's queue is full.

    The queue (``queue.buffering.max.messages`` / ``.kbytes``, 100,000 records or 1 GiB) holds
    the open transaction's records until the brokers acknowledge them, and one transaction can
    hold more: a backlog of large commands, each with its reply; a snapshot per session that
    reached ``snapshot_every``. A full queue raises ``BufferError``, which is not Kafka's
    exception and would end the writer, and the same batch again after every restart. The
    records already queued are this transaction's (a lane's previous one committed, so
    flushed, before it began): once flushed they are in the log, uncommitted, and leave the
    queue. A queue the brokers do not drain in time is a Kafka failure like any other."""
    try:
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers)
        return
    except BufferError:
        metrics.PRODUCER_QUEUE_FULL.inc()
    producer.flush(KAFKA_TIMEOUT_S)
    try:
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers)
    except BufferError:
        raise KafkaException(
            KafkaError(
                KafkaError._QUEUE_FULL,
                f"the producer's queue stayed full for {KAFKA_TIMEOUT_S:.0f}s: the brokers "
                "did not take the transaction's records",
            )
        ) from None


@dataclass(frozen=True)
class Committing:
    """A transaction whose commit runs on the commit thread while the next one is built."""

    txn: Transaction
    done: Future[None]

    @property
    def lane(self) -> int:
        return self.txn.lane

    def failure(self) -> KafkaException | None:
        """Waits for the commit and returns its failure, without raising it: each raise of
        one error object adds the raising frame to its traceback, and a frame that holds this
        transaction (and so the error) makes a cycle, which a frozen heap keeps until a
        recovery sweeps it (DSH_WRITER_GC_FREEZE). Its traceback, the commit thread's frames,
        is dropped too."""
        error = self.done.exception()
        if error is None:
            return None
        if not isinstance(error, KafkaException):
            raise error  # not Kafka's doing: the process fails loudly
        return without_traceback(error)


Failure = tuple[KafkaException, Committing]
