"""A retried request that was rejected gets its original rejection — the same class, code and
message — and appends nothing, even when the session has changed so that it would commit now;
also from a writer that restored the partition (restart, takeover), because the rejections
travel on the snapshots topic in the same transaction as their replies. The memory is bounded:
``rejection_slots`` slots later a retry is validated again."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import dsh
from producers import ConflictError, PayloadTooLargeError, SessionClient
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    PARTITIONS,
    events_end_offsets,
    running_writer,
    writer_settings,
)
from tests.support.builders import user


def _rejected(call: Any) -> dsh.SessionError:
    with pytest.raises(dsh.SessionError) as caught:
        call()
    return caught.value


def _same(a: dsh.SessionError, b: dsh.SessionError) -> None:
    assert (type(a), a.code, a.message) == (type(b), b.code, b.message)


def test_a_retried_rejection_is_answered_with_the_original_even_across_a_restart(
    topics: KafkaSettings,
) -> None:
    sid = f"rejected-{uuid.uuid4().hex[:8]}"
    settings = writer_settings(max_event_bytes=4_000)
    with SessionClient(settings=topics, timeout=20) as client:
        with running_writer(topics, settings) as writer:
            client.append(sid, "user/message", user("u0"), surface_op="append")

            def conflict() -> dsh.Event:
                return client.append(
                    sid,
                    "user/message",
                    user("late"),
                    surface_op="append",
                    expected_seq=2,
                    request_id="r-conflict",
                )

            def no_turn() -> dsh.Event:
                end = {"turn": 1, "reason": {"kind": "completed"}}
                return client.append(sid, "turn/end", end, request_id="r-no-turn")

            def too_big() -> dsh.Event:
                big = user("big", "x" * 5_000)
                return client.append(
                    sid, "user/message", big, surface_op="append", request_id="r-big"
                )

            first = {"conflict": _rejected(conflict), "no_turn": _rejected(no_turn)}
            first["too_big"] = _rejected(too_big)
            assert isinstance(first["conflict"], ConflictError)
            assert first["conflict"].code == "EXPECTED_SEQ_MISMATCH"
            assert isinstance(first["no_turn"], dsh.InvariantError)
            assert isinstance(first["too_big"], PayloadTooLargeError)
            assert first["too_big"].code == "EVENT_TOO_LARGE"
            # Now both would commit: the next seq is 2, and a turn is open.
            client.append(sid, "turn/start", {"turn": 1})
            assert len(client.read(sid)) == 2
            before = events_end_offsets(topics)
            for name, call in (("conflict", conflict), ("no_turn", no_turn), ("too_big", too_big)):
                _same(_rejected(call), first[name])
            assert events_end_offsets(topics) == before
            assert len(writer.partitions[partition_for(sid, PARTITIONS)].rejections) == 3

        # A new writer in the same group restores the partition: it remembers them too.
        with running_writer(topics, settings) as second:
            assert len(second.partitions[partition_for(sid, PARTITIONS)].rejections) == 3
            for name, call in (("conflict", conflict), ("no_turn", no_turn), ("too_big", too_big)):
                _same(_rejected(call), first[name])
            assert events_end_offsets(topics) == before
            assert client.append(sid, "user/message", user("u2"), surface_op="append").seq == 2


def test_the_memory_keeps_the_last_slots_and_validates_older_retries_again(
    topics: KafkaSettings,
) -> None:
    sid = f"evicted-{uuid.uuid4().hex[:8]}"
    settings = writer_settings(rejection_slots=2)
    home = partition_for(sid, PARTITIONS)

    def attempt(client: SessionClient, n: int) -> dsh.Event:
        return client.append(sid, "turn/start", {"turn": 2}, request_id=f"r-{n}")

    with SessionClient(settings=topics, timeout=20) as client:
        with running_writer(topics, settings) as writer:
            client.append(sid, "turn/start", {"turn": 1})
            # Three rejections, each its own transaction (one append waits for the last):
            # three slots, of which two are kept.
            errors = [_rejected(lambda n=n: attempt(client, n)) for n in range(3)]
            assert all(e.code == "TURN_ALREADY_OPEN" for e in errors)
            assert len(writer.partitions[home].rejections) == 2
            client.append(sid, "turn/end", {"turn": 1, "reason": {"kind": "completed"}})
            # r-1 and r-2 are remembered: rejected again although a turn/start fits now.
            _same(_rejected(lambda: attempt(client, 1)), errors[1])
            _same(_rejected(lambda: attempt(client, 2)), errors[2])
        with running_writer(topics, settings) as second:
            assert len(second.partitions[home].rejections) == 2
            _same(_rejected(lambda: attempt(client, 2)), errors[2])
            # r-0's slot was overwritten: its retry is validated afresh and commits.
            committed = attempt(client, 0)
            assert committed.seq == 2
        with running_writer(topics, settings):
            assert attempt(client, 0) == committed  # now answered from the log
        assert [e.type for e in client.read_log(sid).events()] == [
            "turn/start",
            "turn/end",
            "turn/start",
        ]
