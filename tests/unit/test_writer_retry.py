"""What the writer produces again after a transaction was refused for a moved group generation,
without Kafka: which partitions (``still_served``) and with which headers."""

from __future__ import annotations

from producers.state import PartitionState
from producers.writer import (
    _REPLY,
    _SNAPSHOT,
    _record_headers,
    _Transaction,
    still_served,
)
from schemas import APPEND_REPLY, HEADER_REQUEST, WRITER_SNAPSHOT, event_headers, record_headers


def _txn(lane: int, states: dict[int, PartitionState]) -> _Transaction:
    return _Transaction(lane, dict.fromkeys(states, 10), [], dict(states))


def test_only_partitions_still_served_from_the_state_their_commands_changed() -> None:
    a, b, c = PartitionState(0), PartitionState(1), PartitionState(2)
    failed = [_txn(0, {0: a, 1: b}), _txn(1, {1: b, 2: c})]
    assert still_served(failed, {0: a, 1: b, 2: c}) == {0, 1, 2}
    # 0 revoked; 2 revoked and assigned again, restored from the log without these records.
    assert still_served(failed, {1: b, 2: PartitionState(2)}) == {1}
    # A partition the transactions never touched is not theirs to produce.
    assert still_served(failed, {3: PartitionState(3)}) == set()


def test_a_partition_restored_between_the_two_transactions_is_left_to_the_log() -> None:
    before, after = PartitionState(0), PartitionState(0)
    failed = [_txn(0, {0: before}), _txn(1, {0: after})]
    assert still_served(failed, {0: after}) == set()


def test_a_record_produced_again_gets_the_headers_it_was_first_produced_with() -> None:
    # The journal keeps what the headers are, not the headers: each kind must come back as
    # the writer first built it.
    rid = b"req-1"
    assert _record_headers("user/message", rid) == [
        *event_headers("user/message"),
        (HEADER_REQUEST, rid),
    ]
    assert _record_headers(_REPLY, rid) == [*record_headers(APPEND_REPLY), (HEADER_REQUEST, rid)]
    assert _record_headers(_SNAPSHOT, None) == record_headers(WRITER_SNAPSHOT)
    dead_letter: list[tuple[str, str | bytes | None]] = [("dsh-dlq-code", b"X")]
    assert _record_headers(dead_letter, None) is dead_letter
