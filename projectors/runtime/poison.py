"""Poison records: the commands that block their session, and their dead letters.

A record that cannot be decoded, or that the rules refuse, goes to the DLQ as it came; its
session is marked blocked (in its meta hash, with the seq and the reason, and in the blocked
set) and other sessions keep flowing. The planner (:mod:`.batches`) and the rebuilds decide
what is poison; :class:`PoisonRecords` sends the dead letters, which only the consumer loop
and a catch-up do: a rebuild blocks a session on its poison record without sending it again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from projectors import metrics
from projectors.keys import Keys
from projectors.projection import dumps
from projectors.records import Poison, Record, encode
from projectors.scripts import BLOCK
from schemas.records import event_headers
from servicekit.dlq import DeadLetters, source_of
from servicekit.settings import KafkaSettings

log = logging.getLogger("projectors")

Command = tuple[Any, ...]


@dataclass(frozen=True)
class DeadLetter:
    poison: Poison
    seq: int = -1  # the event's, when it was decoded
    record: Record | None = None  # decoded, then refused by the rules: sent re-encoded


def block_commands(
    keys: Keys, projection: str, topic: str, poison: Poison, seq: int
) -> list[Command]:
    """Block the poison record's session: the BLOCK script call on its meta hash (the truth,
    which the apply script reads), then its entry in the blocked set (an index over them)."""
    sid = poison.session_id
    assert sid is not None
    error = poison.error
    reason = {
        "code": error.code,
        "error": type(error).__name__,
        "message": error.message,
        "seq": seq,
        "source": source_of(topic, poison.partition, poison.offset),
    }
    return [
        ("EVALSHA", BLOCK.sha, 1, keys.meta(projection, sid), seq, dumps(reason)),
        ("SADD", keys.blocked(projection), sid),
    ]


class PoisonRecords:
    """Dead letters of one projector, on a producer made on the first one (``servicekit.dlq``)."""

    def __init__(self, kafka: KafkaSettings, name: str, topic: str, stats: Counter[str]) -> None:
        self.name = name
        self.topic = topic
        self.stats = stats
        self.dlq = DeadLetters(kafka, f"project-{name}")

    def deliver(self, letters: Sequence[DeadLetter]) -> None:
        for letter in letters:
            self._send(letter)

    def flush(self) -> None:
        self.dlq.flush()

    def close(self) -> None:
        self.dlq.close()

    def _send(self, letter: DeadLetter) -> None:
        poison, seq, record = letter.poison, letter.seq, letter.record
        error = poison.error
        source = source_of(self.topic, poison.partition, poison.offset)
        value, headers = poison.value, poison.headers
        if value is None and record is not None:  # refused after decoding: send it re-encoded
            value = encode(record.session_id, record.event.to_json())
            headers = tuple(event_headers(record.event.type))
        self.dlq.send(poison.key, value, error, source, headers)
        self.stats["poison"] += 1  # published to Prometheus once per batch
        metrics.DLQ.labels(self.name, error.code).inc()
        context: dict[str, Any] = {"partition": poison.partition, "code": error.code}
        if poison.session_id is not None:
            context["session"] = poison.session_id
        if seq >= 0:
            context["seq"] = seq
        log.warning(
            "projector %s: %s → DLQ%s: [%s] %s",
            self.name,
            source,
            "" if poison.session_id is None else f", session {poison.session_id} blocked",
            error.code,
            error.message,
            extra=context,
        )
