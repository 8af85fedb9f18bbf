"""Poison records go to the DLQ topic as they came (key and value untouched), with the reason
in headers, so an operator can read why and replay them once the cause is fixed."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Producer

from deploy.config import KafkaSettings
from deploy.topics import PRODUCER_PARTITIONER
from dsh.errors import SessionError

REASON_HEADERS = (
    "dsh-dlq-projector",
    "dsh-dlq-error",
    "dsh-dlq-code",
    "dsh-dlq-reason",
    "dsh-dlq-source",
)


class DeadLetters:
    def __init__(self, kafka: KafkaSettings, projector: str) -> None:
        self.topic = kafka.topic("dlq")
        self.projector = projector
        self.kafka = kafka
        # Made on the first dead letter: a replay never sends one, and its worker processes
        # are forked from a process that should hold no live Kafka client.
        self._producer: Producer | None = None
        self.pending = 0

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                {**self.kafka.client_config(), **PRODUCER_PARTITIONER, "enable.idempotence": True}
            )
        return self._producer

    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        error: SessionError,
        source: str,
        original: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        # The record's own headers travel along (dsh-type, dsh-format, dsh-request-id, …).
        headers: list[tuple[str, str | bytes | None]] = [
            *((k, v) for k, v in original if not k.startswith("dsh-dlq-")),
            ("dsh-dlq-projector", self.projector.encode()),
            ("dsh-dlq-error", type(error).__name__.encode()),
            ("dsh-dlq-code", error.code.encode()),
            ("dsh-dlq-reason", error.message.encode()),
            ("dsh-dlq-source", source.encode()),
        ]
        self.producer.produce(self.topic, key=key, value=value, headers=headers)
        self.pending += 1

    def flush(self, timeout_s: float = 30.0) -> None:
        """Before offsets are committed: a dead letter is never lost to a crash after it."""
        if self.pending:
            left = self.producer.flush(timeout_s)
            if left:
                raise SessionError(
                    f"DLQ: {left} record(s) not delivered in {timeout_s}s", code="DLQ_UNDELIVERED"
                )
            self.pending = 0

    def close(self) -> None:
        """Deliver what is pending, then end the producer's threads (if one was made)."""
        self.flush()
        if self._producer is not None:
            self._producer.close()
            self._producer = None
