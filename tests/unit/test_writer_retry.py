"""Which partitions of transactions refused for a moved group generation the writer may produce
again (``producers.writer.still_served``), without Kafka."""

from __future__ import annotations

from producers.state import PartitionState
from producers.writer import _Transaction, still_served


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
