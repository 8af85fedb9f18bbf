"""Dead letters: records a service cannot use go to the DLQ topic as they came (key and value
untouched, their own headers kept), with why in headers of one scheme, whoever sends them:

| header | value |
|---|---|
| ``dsh-dlq-service`` | who refused it: ``writer``, ``project-surface``, … |
| ``dsh-dlq-error`` | the error's class, e.g. ``CorruptRecordError`` |
| ``dsh-dlq-code`` | its stable code, e.g. ``CODEC_CORRUPT`` |
| ``dsh-dlq-reason`` | its message |
| ``dsh-dlq-source`` | where the record was: ``<topic>[<partition>]@<offset>`` |

An operator reads why, fixes the cause and replays the record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError, Message, Producer

from dsh.errors import SessionError
from servicekit import kafka_clients
from servicekit.settings import KafkaSettings

PREFIX = "dsh-dlq-"
SERVICE, ERROR, CODE, REASON, SOURCE = (
    f"{PREFIX}{name}" for name in ("service", "error", "code", "reason", "source")
)
Headers = list[tuple[str, str | bytes | None]]


def source_of(topic: str, partition: int, offset: int) -> str:
    return f"{topic}[{partition}]@{offset}"


def dead_letter_headers(
    service: str,
    error: SessionError,
    source: str,
    original: Sequence[tuple[str, str | bytes | None]]
    | Mapping[str, str | bytes | None]
    | None = (),
) -> Headers:
    """The record's own headers (``dsh-type``, ``dsh-request-id``, …; any earlier dead-letter
    reason dropped), then why it is a dead letter."""
    pairs = original.items() if isinstance(original, Mapping) else original or ()
    return [
        *((k, v) for k, v in pairs if not k.startswith(PREFIX)),
        (SERVICE, service.encode()),
        (ERROR, type(error).__name__.encode()),
        (CODE, error.code.encode()),
        (REASON, error.message.encode()),
        (SOURCE, source.encode()),
    ]


class DeadLetters:
    """Dead letters sent on a producer of their own (a projector's; the writer sends its own
    inside its transactions, with :func:`dead_letter_headers`)."""

    def __init__(self, kafka: KafkaSettings, service: str) -> None:
        self.topic = kafka.topic("dlq")
        self.service = service
        self.kafka = kafka
        # Made on the first dead letter: a replay never sends one, and its worker processes
        # are forked from a process that should hold no live Kafka client.
        self._producer: Producer | None = None
        self.pending = 0
        self._refused: list[str] = []  # why each dead letter since the last flush was not stored

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = kafka_clients.producer(self.kafka, **{"enable.idempotence": True})
        return self._producer

    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        error: SessionError,
        source: str,
        original: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        headers = dead_letter_headers(self.service, error, source, original)
        self.producer.produce(
            self.topic, key=key, value=value, headers=headers, on_delivery=self._delivered
        )
        self.pending += 1

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._refused.append(err.str())

    def flush(self, timeout_s: float = 30.0) -> None:
        """Before offsets are committed: a dead letter is never lost to a crash after it, nor
        to a delivery that failed (its message timed out, the broker refused it): either
        raises, and the records go again from the last commit."""
        if self.pending:
            left = self.producer.flush(timeout_s)
            refused, self._refused = self._refused, []
            if left:
                raise SessionError(
                    f"DLQ: {left} record(s) not delivered in {timeout_s}s", code="DLQ_UNDELIVERED"
                )
            if refused:
                raise SessionError(
                    f"DLQ: {len(refused)} record(s) not delivered: {refused[0]}",
                    code="DLQ_UNDELIVERED",
                )
            self.pending = 0

    def close(self) -> None:
        """Deliver what is pending, then end the producer's threads (if one was made), also
        when the delivery fails: the error goes on, not a producer retrying in the background."""
        try:
            self.flush()
        finally:
            if self._producer is not None:
                self._producer.close()
                self._producer = None
