"""A rebalance can be served inside ``consume`` as well as inside ``poll``. If partitions are
revoked there while a transaction is failing to commit, the failure is recovered before the
batch is built: a batch built on the failed transaction's events would commit seqs after a
gap. Drives ``Writer._step`` with stand-ins for the consumer and the pipeline (no broker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from producers.writer.service import Writer

FAILURE = KafkaException(KafkaError(KafkaError._TIMED_OUT, "the commit timed out"))


@dataclass
class _Consumer:
    writer: Writer
    revoke_in_consume: bool
    fetched: Message = field(default_factory=lambda: Message(topic="c", partition=0, offset=7))

    def poll(self, timeout: float) -> Message:
        return self.fetched

    def consume(self, count: int, timeout: float) -> list[Message]:
        if self.revoke_in_consume:  # what Writer.revoke leaves when the commit failed
            self.writer._deferred = (FAILURE, SimpleNamespace(lane=1))  # type: ignore[assignment]
        return []


class _Membership:
    def raise_pending(self) -> None:
        pass


def _writer(monkeypatch: pytest.MonkeyPatch, *, revoke_in_consume: bool, rewinds: bool) -> Any:
    writer = object.__new__(Writer)
    consumer = _Consumer(writer, revoke_in_consume)
    calls: dict[str, list[Any]] = {"recover": [], "process": []}

    def recover(exc: KafkaException, lane: int) -> bool:
        calls["recover"].append((exc, lane))
        return rewinds

    monkeypatch.setattr(writer, "_recover", recover)
    monkeypatch.setattr(writer, "_process", lambda records: calls["process"].append(records))
    writer._consumer = consumer  # type: ignore[assignment]
    writer._membership = _Membership()  # type: ignore[assignment]
    writer._deferred = None
    writer._last_batch_at = 0.0
    writer.pipeline = SimpleNamespace(commit_done=lambda: False, committing=None)  # type: ignore[assignment]
    writer.settings = SimpleNamespace(  # type: ignore[assignment]
        poll_timeout_ms=10, min_transaction_interval_ms=0, batch_max_commands=100
    )
    return writer, consumer, calls


def test_a_failure_deferred_inside_consume_is_recovered_before_the_batch_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer, _, calls = _writer(monkeypatch, revoke_in_consume=True, rewinds=True)
    writer._step()
    assert calls["recover"] == [(FAILURE, 1)]
    assert calls["process"] == []  # rewound: the fetched command comes again, in order
    assert writer._deferred is None


@pytest.mark.parametrize(
    ("revoke_in_consume", "recovered"),
    [
        (True, [(FAILURE, 1)]),  # the failed records were produced again: the batch goes on
        (False, []),  # no rebalance: the batch is handled at once
    ],
    ids=["recovered-without-a-rewind", "no-rebalance"],
)
def test_the_batch_goes_on_when_nothing_was_rewound(
    monkeypatch: pytest.MonkeyPatch, revoke_in_consume: bool, recovered: list[Any]
) -> None:
    writer, consumer, calls = _writer(
        monkeypatch, revoke_in_consume=revoke_in_consume, rewinds=False
    )
    writer._step()
    assert calls["recover"] == recovered
    assert calls["process"] == [[consumer.fetched]]
