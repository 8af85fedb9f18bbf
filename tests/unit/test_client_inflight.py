"""The client's table of requests waiting for a reply: the writer keeps request ids per
session, so a reply answers the request of its own session only; and a future its waiter
cancelled never stops the thread that answers the others. Fed real ``confluent_kafka``
messages, as the replies consumer hands them over, with no broker."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from producers.client_inflight import InFlight
from producers.errors import AppendTimeoutError, ReplyUndecodableError, WriterUnavailableError
from schemas import HEADER_READ_NEXT, HEADER_REQUEST, AppendReply, EventRecord, encode_reply
from tests.support.builders import user

CLIENT = "client-under-test"


def _inflight() -> InFlight:
    return InFlight(CLIENT, threading.Event())


def _reply(session_id: str, request_id: str, seq: int) -> Message:
    event = {"seq": seq, "type": "user/message", "time": 1700000000000, "data": user("u0")}
    value = encode_reply(AppendReply.committed(request_id, CLIENT, session_id, [event]))
    return Message(key=CLIENT.encode(), value=value)


def _waiting(inflight: InFlight, session_id: str, request_id: str) -> Future[Any]:
    future: Future[Any] = Future()
    assert inflight.add(request_id, future, session_id, 30.0, "many") is None
    return future


def test_one_request_id_in_flight_to_two_sessions_gets_each_session_its_own_reply() -> None:
    inflight = _inflight()
    to_a = _waiting(inflight, "session-a", "key-1")
    to_b = _waiting(inflight, "session-b", "key-1")
    assert to_a is not to_b

    inflight._on_reply(_reply("session-b", "key-1", 7))
    assert not to_a.done()
    assert [e.seq for e in to_b.result(0)] == [7]

    inflight._on_reply(_reply("session-a", "key-1", 3))
    assert [e.seq for e in to_a.result(0)] == [3]


def test_the_same_request_to_the_same_session_waits_on_the_first_future() -> None:
    inflight = _inflight()
    first = _waiting(inflight, "session-a", "key-1")
    assert inflight.add("key-1", Future(), "session-a", 30.0, "many") is first


def test_a_failed_delivery_fails_the_request_of_its_own_session() -> None:
    inflight = _inflight()
    to_a = _waiting(inflight, "session-a", "key-1")
    to_b = _waiting(inflight, "session-b", "key-1")
    failed = Message(key=b"session-b", headers=[(HEADER_REQUEST, b"key-1")])
    inflight.undelivered(KafkaError(KafkaError._MSG_TIMED_OUT), failed)
    assert not to_a.done()
    with pytest.raises(WriterUnavailableError):
        to_b.result(0)


def test_a_cancelled_waiter_does_not_stop_the_other_replies_or_the_deadlines() -> None:
    inflight = _inflight()
    gone = _waiting(inflight, "session-a", "key-1")
    kept = _waiting(inflight, "session-b", "key-2")
    assert gone.cancel()
    inflight._on_reply(_reply("session-a", "key-1", 0))  # would raise InvalidStateError
    inflight._on_reply(_reply("session-b", "key-2", 0))
    assert [e.seq for e in kept.result(0)] == [0]

    late = _waiting(inflight, "session-c", "key-3")
    expiring = _waiting(inflight, "session-d", "key-4")
    assert late.cancel()
    inflight._expire(now=float("inf"))
    with pytest.raises(AppendTimeoutError):
        expiring.result(0)


def test_a_reply_that_cannot_be_read_into_a_result_fails_its_request_typed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Taken out of the table before it is read, the request has no deadline any more: were
    the error only logged, its caller would wait for ever."""

    def unreadable(self: EventRecord) -> Any:
        raise ValueError("no such event type in this client")

    inflight = _inflight()
    waiting = _waiting(inflight, "session-a", "key-1")
    with monkeypatch.context() as m:
        m.setattr(EventRecord, "to_event", unreadable)
        inflight._on_reply(_reply("session-a", "key-1", 0))
    with pytest.raises(ReplyUndecodableError, match="'key-1' to session 'session-a'"):
        waiting.result(0)
    # The thread goes on answering the others.
    other = _waiting(inflight, "session-b", "key-2")
    inflight._on_reply(_reply("session-b", "key-2", 4))
    assert [e.seq for e in other.result(0)] == [4]


def test_a_read_reply_with_a_malformed_next_seq_fails_the_read_typed() -> None:
    inflight = _inflight()
    future: Future[Any] = Future()
    assert inflight.add("read-1", future, "session-a", 30.0, "read") is None
    reply = _reply("session-a", "read-1", 0)
    reply.set_headers([(HEADER_READ_NEXT, b"not-a-seq")])
    inflight._on_reply(reply)
    with pytest.raises(ReplyUndecodableError, match="ValueError"):
        future.result(0)


def test_the_committed_seqs_kept_for_read_your_writes_are_bounded_by_recent_use() -> None:
    """A long-lived client appending to millions of sessions keeps only the most recently
    committed to: the others' reads pass ``at_least`` themselves."""
    inflight = InFlight(CLIENT, threading.Event(), committed_sessions=2)
    for i, sid in enumerate(["session-a", "session-b", "session-a", "session-c"]):
        _waiting(inflight, sid, f"key-{i}")
        inflight._on_reply(_reply(sid, f"key-{i}", i))
    assert inflight.committed_seq("session-b") is None  # the least recent of three
    assert inflight.committed_seq("session-a") == 2
    assert inflight.committed_seq("session-c") == 3
    # A late reply to a retried request names an earlier seq: the later one stays.
    _waiting(inflight, "session-c", "key-0")
    inflight._on_reply(_reply("session-c", "key-0", 1))
    assert inflight.committed_seq("session-c") == 3
    assert len(inflight._committed) == 2
