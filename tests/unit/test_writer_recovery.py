"""What the writer does after a failed transaction, decided without Kafka: stop, produce again
or restore (``producers/writer/recovery.py``), which partitions it may produce again, and the
headers a journaled record is produced again with (``producers/writer/journal.py``)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from producers.writer.journal import REPLY, SNAPSHOT, headers_of
from producers.writer.recovery import (
    Ending,
    Verdict,
    ending,
    fenced,
    retry_commit,
    stale_generation,
    still_served,
    unfenced,
    verdict,
)
from producers.writer.state import PartitionState
from schemas import APPEND_REPLY, HEADER_REQUEST, WRITER_SNAPSHOT, event_headers, record_headers


def error(code: int, *, fatal: bool = False, retriable: bool = False) -> KafkaError:
    return KafkaError(code, "from the table", fatal=fatal, retriable=retriable)


GENERATION = error(KafkaError.ILLEGAL_GENERATION)
REBALANCING = error(KafkaError.REBALANCE_IN_PROGRESS)
TIMED_OUT = error(KafkaError._TIMED_OUT)
EPOCH = error(KafkaError.PRODUCER_FENCED, fatal=True)
REFUSED_ID = error(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
INVALID_STATE = error(KafkaError._STATE, fatal=True)
ABORTABLE = error(KafkaError.COORDINATOR_NOT_AVAILABLE)


@pytest.mark.parametrize(
    ("failures", "shared_id", "expected"),
    [
        ([GENERATION], False, Verdict.PRODUCE_AGAIN),
        ([GENERATION, REBALANCING], False, Verdict.PRODUCE_AGAIN),
        # One transaction refused for another reason: nothing of either may be trusted.
        ([GENERATION, TIMED_OUT], False, Verdict.RESTORE),
        ([error(KafkaError.ILLEGAL_GENERATION, fatal=True)], False, Verdict.RESTORE),
        ([TIMED_OUT], False, Verdict.RESTORE),
        ([ABORTABLE], False, Verdict.RESTORE),
        # A moved epoch on an id of this process's own: the coordinator ended a timed-out
        # transaction; a new producer cures it.
        ([EPOCH], False, Verdict.RESTORE),
        # On a configured id another process may hold: taking it back would fence that one.
        ([EPOCH], True, Verdict.STOP),
        ([GENERATION, EPOCH], True, Verdict.STOP),
        # Refused the id: no new producer helps.
        ([REFUSED_ID], False, Verdict.STOP),
        ([error(KafkaError.CLUSTER_AUTHORIZATION_FAILED)], False, Verdict.STOP),
    ],
)
def test_what_a_failed_transaction_leads_to(
    failures: list[KafkaError], shared_id: bool, expected: Verdict
) -> None:
    assert verdict(failures, shared_id=shared_id) is expected


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (None, Ending.ABORT),  # abandoned: it failed only with the one before it
        (ABORTABLE, Ending.ABORT),
        (GENERATION, Ending.ABORT),
        (TIMED_OUT, Ending.REPLACE),  # an abort would block on a coordinator that moved
        (INVALID_STATE, Ending.REPLACE),
        (EPOCH, Ending.REPLACE),
    ],
)
def test_how_a_failed_transaction_ends(err: KafkaError | None, expected: Ending) -> None:
    assert ending(err) is expected


def test_only_a_moved_generation_that_is_not_fatal_is_stale() -> None:
    assert stale_generation(GENERATION) and stale_generation(REBALANCING)
    assert not stale_generation(error(KafkaError.ILLEGAL_GENERATION, fatal=True))
    assert not stale_generation(TIMED_OUT)
    assert not fenced(GENERATION, shared_id=True)


@pytest.mark.parametrize(
    ("retriable", "attempt", "expected"),
    [(True, 0, True), (True, 1, True), (True, 2, False), (False, 0, False)],
)
def test_a_commit_is_tried_three_times_while_retriable(
    retriable: bool, attempt: int, expected: bool
) -> None:
    err = error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=retriable)
    assert retry_commit(err, attempt) is expected


def test_group_metadata_of_a_member_that_lost_its_membership_is_unfenced() -> None:
    assert unfenced(b"CGMDv2:\xff\xff\xff\xffdsh-writer\x00\x00\x01")
    assert unfenced(b"CGMDv2:\x05\x00\x00\x00dsh-writer\x00\x00\x01")
    assert not unfenced(b"CGMDv2:\x05\x00\x00\x00dsh-writer\x00rdkafka-1\x00\x01")
    assert not unfenced(b"CGMDv3:anything")  # a form we do not know: the broker checks it


def test_only_partitions_still_served_from_the_state_their_commands_changed() -> None:
    a, b, c = PartitionState(0), PartitionState(1), PartitionState(2)
    failed = [{0: a, 1: b}, {1: b, 2: c}]
    assert still_served(failed, {0: a, 1: b, 2: c}) == {0, 1, 2}
    # 0 revoked; 2 revoked and assigned again, restored from the log without these records.
    assert still_served(failed, {1: b, 2: PartitionState(2)}) == {1}
    # A partition the transactions never touched is not theirs to produce.
    assert still_served(failed, {3: PartitionState(3)}) == set()


def test_a_partition_restored_between_the_two_transactions_is_left_to_the_log() -> None:
    before, after = PartitionState(0), PartitionState(0)
    failed = [{0: before}, {0: after}]
    assert still_served(failed, {0: after}) == set()


def test_a_record_produced_again_gets_the_headers_it_was_first_produced_with() -> None:
    # The journal keeps what the headers are, not the headers: each kind must come back as
    # the writer first built it.
    rid = b"req-1"
    assert headers_of("user/message", rid) == [
        *event_headers("user/message"),
        (HEADER_REQUEST, rid),
    ]
    assert headers_of(REPLY, rid) == [*record_headers(APPEND_REPLY), (HEADER_REQUEST, rid)]
    assert headers_of(SNAPSHOT, None) == record_headers(WRITER_SNAPSHOT)
    dead_letter: list[tuple[str, str | bytes | None]] = [("dsh-dlq-code", b"X")]
    assert headers_of(dead_letter, None) is dead_letter
