"""Hostile input, through the client and raw on the commands topic, while good sessions keep
appending: each bad command gets a typed rejection (client) or a DLQ entry with its reason
(raw bytes the writer cannot decode); the writers and projectors never crash or stall, and the
good sessions' history stays clean. A hypothesis fuzzer drives random command payloads."""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsh
from deploy.local.stack import LocalStack
from dsh.errors import SessionError
from producers import (
    MalformedCommandError,
    PayloadTooLargeError,
    SessionClient,
    WrongPartitionError,
)
from schemas import (
    APPEND_COMMAND,
    HEADER_REQUEST,
    AppendCommand,
    UnencodableError,
    decode_reply,
    draft,
    encode_command,
    record_headers,
)
from servicekit.partitioning import PRODUCER_PARTITIONER, partition_for
from tests.reliability.harness import (
    PARTITIONS,
    History,
    Load,
    LoadDriver,
    Namespace,
    Pipeline,
    check_history,
    read_topic,
    record_figures,
    sessions_spread,
    verify_all,
)
from tests.support.topics import fresh_topics
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def bad(cluster: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namespace]:
    """One pipeline for the module; the bad-input tests share it (and prove it survives)."""

    kafka = fresh_topics(cluster.settings.bootstrap_servers(), PARTITIONS, "bad")
    ns = Namespace(kafka, cluster.settings.redis_url(), tmp_path_factory.mktemp("bad-input"))
    with Pipeline(ns) as pipeline:
        ns.pipeline = pipeline  # type: ignore[attr-defined]
        yield ns
        assert all(s.alive() for s in pipeline.services()), "a service died on bad input"
        assert not pipeline.restarts(), f"services restarted: {pipeline.restarts()}"


@pytest.fixture(scope="module")
def bad_client(bad: Namespace) -> Iterator[SessionClient]:
    with SessionClient(settings=bad.kafka, timeout=20) as client:
        yield client


# The good sessions appending beside the bad input (what the figures report).
GOOD_LOAD = Load("reduced", sessions=8, window=2, warmup_s=0, after_s=0)


def _message(mid: str) -> dict[str, Any]:
    return {"id": mid, "role": "user", "content": [{"type": "text", "text": mid}],
            "source": {"kind": "user"}}  # fmt: skip


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


# (case, type, data, surface_op, source_event_seqs, ignorable) → expected error class
CLIENT_CASES: list[tuple[str, str, Any, Any, Any, bool, type[SessionError]]] = [
    ("oversize event (300 KB)", "session/title", {"t": "x" * 300_000}, None, None, False,
     PayloadTooLargeError),
    ("oversize command (2 MB, refused before Kafka)", "session/title", {"t": "x" * 2_000_000},
     None, None, False, PayloadTooLargeError),
    ("deeply nested JSON (5000 levels)", "session/title", {"x": _nested(5000)}, None, None,
     False, dsh.ValidationError),
    ("NaN", "session/title", {"x": math.nan}, None, None, False, dsh.ValidationError),
    ("Infinity", "session/title", {"x": math.inf}, None, None, False, dsh.ValidationError),
    ("a set", "session/title", {"x": {1, 2}}, None, None, False, dsh.ValidationError),
    ("bytes", "session/title", {"x": b"\x00"}, None, None, False, dsh.ValidationError),
    ("an object", "session/title", {"x": object()}, None, None, False, dsh.ValidationError),
    ("int key", "session/title", {1: "x"}, None, None, False, dsh.ValidationError),
    ("type: int", 123, {}, None, None, False, dsh.ValidationError),  # type: ignore[list-item]
    ("type: empty", "", {}, None, None, False, dsh.ValidationError),
    ("type: no family", "title", {}, None, None, False, dsh.ValidationError),
    ("data: wrong type for turn/start", "turn/start", {"turn": "one"}, None, None, False,
     dsh.ValidationError),
    ("data: list for user/message", "user/message", [1, 2], "append", None, False,
     dsh.ValidationError),
    ("data: message with wrong role", "user/message",
     {**_message("m"), "role": "assistant"}, "append", None, False, dsh.ValidationError),
    ("surfaceOp: unknown string", "user/message", _message("m"), "sideways", None, False,
     dsh.ValidationError),
    ("surfaceOp: missing on a surface type", "user/message", _message("m"), None, None, False,
     dsh.ValidationError),
    ("surfaceOp: on a log-only type", "turn/end", {"turn": 1, "reason": {"kind": "completed"}},
     "append", None, False, dsh.ValidationError),
    ("sourceEventSeqs: strings", "user/message", _message("m"), "append", ["a"], False,
     dsh.ValidationError),
    ("sourceEventSeqs: negative", "user/message", _message("m"), "append", [-1], False,
     dsh.ValidationError),
    ("sourceEventSeqs: in the future", "user/message", _message("m"), "append", [999], False,
     dsh.ValidationError),
    ("sourceEventSeqs: on assistant/message", "assistant/message", {}, "append", [0], False,
     dsh.ValidationError),
    ("replace: far past the end", "user/message", _message("m"),
     {"op": "replace", "startSeq": 1000, "endSeq": 2000}, [1000], False, dsh.ValidationError),
    ("replace: negative", "user/message", _message("m"),
     {"op": "replace", "startSeq": -5, "endSeq": 1}, [1], False, dsh.ValidationError),
    ("replace: start after end", "user/message", _message("m"),
     {"op": "replace", "startSeq": 1, "endSeq": 0}, [0, 1], False, dsh.ValidationError),
    ("replace: a log-only node", "user/message", _message("m"),
     {"op": "replace", "startSeq": 0, "endSeq": 0}, [0], False, dsh.ValidationError),
    ("replace: not citing what it hides", "user/message", _message("m"),
     {"op": "replace", "startSeq": 1, "endSeq": 1}, None, False, dsh.ValidationError),
    ("unknown type", "weird/type", {}, None, None, False, dsh.ValidationError),
    ("image/offload without an interpreter", "image/offload", {"seqs": [1]}, None, None, False,
     dsh.ValidationError),
]  # fmt: skip


def test_bad_input_through_the_client_gets_typed_rejections(
    bad: Namespace, bad_client: SessionClient, redis_client: redis.Redis
) -> None:
    good = sessions_spread(8, prefix="good")
    history = History(good)
    outcomes = []
    with LoadDriver(bad_client, history, 2):
        # Every case on its own session, all in flight at once: a session with one turn open,
        # then the bad append, then a good one that must get the next seq.
        victims = [f"victim-{uuid.uuid4().hex[:8]}" for _ in CLIENT_CASES]
        opened = [
            bad_client.append_many_async(
                sid,
                [draft("turn/start", {"turn": 1}),
                 draft("user/message", _message("u1"), surface_op="append")],
            )
            for sid in victims
        ]  # fmt: skip
        for f in opened:
            f.result(60)
        bad_futures = [
            bad_client.append_async(
                sid, type_, data, surface_op=op, source_event_seqs=sources, ignorable=ignorable
            )
            for sid, (_, type_, data, op, sources, ignorable, _) in zip(
                victims, CLIENT_CASES, strict=True
            )
        ]
        for future, (case, *_, expected) in zip(bad_futures, CLIENT_CASES, strict=True):
            error = future.exception(60)
            # The client raises what the in-process core raises (tests/contract), not the
            # codec's error: data that is not lossless JSON is the core's ValidationError.
            assert isinstance(error, expected), (case, error)
            assert isinstance(error, SessionError) and error.code, case
            outcomes.append((case, type(error).__name__, error.code))
        after = [bad_client.append_async(sid, "session/title", {"t": "ok"}) for sid in victims]
        for g, (case, *_) in zip(after, CLIENT_CASES, strict=True):
            assert g.result(60).seq == 2, case  # the session is not harmed
        # A forged seq or time cannot even be expressed: the command schema has no such field.
        with pytest.raises(UnencodableError):
            bad_client.append_many(
                "forger", [{"type": "turn/start", "data": {"turn": 1}, "seq": 7, "time": 0}]
            )
        ev = bad_client.append("forger", "session/title", {"seq": 7, "time": 0})
        assert (ev.seq, ev.data["seq"]) == (0, 7)  # data is data; the writer assigns seq
    verdict = check_history(bad.kafka, history)
    verdict.assert_clean()
    verify_all(bad, redis_client, good, 60)
    record_figures(
        "bad input: client", GOOD_LOAD, verdict, cases=len(outcomes), rejected_typed=len(outcomes)
    )
    for case, cls, code in outcomes:
        print(f"BADINPUT client | {case} | {cls} | {code}")


def _raw_producer(bad: Namespace) -> Producer:
    return Producer({**bad.kafka.client_config(), **PRODUCER_PARTITIONER})


def _replies_for(bad: Namespace, request_ids: list[str], timeout_s: float = 60.0) -> list[Any]:
    """The writer's replies to raw commands, read off the replies topic in one scan each try."""
    wanted = {rid.encode(): rid for rid in request_ids}
    found: dict[str, Any] = {}

    def look() -> bool:
        for m in read_topic(bad.kafka, bad.kafka.topic("replies")):
            rid = dict(m.headers() or []).get(HEADER_REQUEST)
            if rid in wanted:
                found[wanted[rid]] = decode_reply(m.value())
        return len(found) == len(wanted)

    wait_for(look, timeout_s, f"the replies to {request_ids}")
    return [found[rid] for rid in request_ids]


def _dlq(bad: Namespace) -> dict[str, dict[str, bytes]]:
    """DLQ entries by their dsh-dlq-source (topic[partition]@offset) → headers."""
    out = {}
    for m in read_topic(bad.kafka, bad.kafka.topic("dlq")):
        headers = dict(m.headers() or [])
        out[m.value()[:16].hex() + headers.get("dsh-dlq-source", b"").decode()] = headers
    return out


def test_bad_input_raw_on_the_commands_topic_goes_to_the_dlq_or_a_typed_reply(
    bad: Namespace, bad_client: SessionClient, redis_client: redis.Redis
) -> None:
    commands = bad.kafka.topic("commands")
    producer = _raw_producer(bad)
    headers: list[tuple[str, str | bytes | None]] = [*record_headers(APPEND_COMMAND)]
    valid = encode_command(
        AppendCommand("r0", "raw", "raw-1", (draft("session/title", {"t": "x"}),))
    )
    garbage = {
        "garbage bytes": os.urandom(200),
        "empty value": b"",
        "right marker, truncated": b"\xc3\x01\x00",
        "unknown schema fingerprint": b"\xc3\x01" + b"\xde\xad\xbe\xef" * 2 + valid[10:],
        "a forged seq/time (a schema of its own)": b"\xc3\x01" + os.urandom(8) + valid[10:],
        "valid header, body cut short": valid[: len(valid) // 2],
        "trailing bytes": valid + b"\x00\x01",
        "an events-topic record": bytes.fromhex("c301") + b"\x00" * 8,
    }
    good = sessions_spread(8, prefix="raw-good")
    history = History(good)
    with LoadDriver(bad_client, history, 2):
        for i, value in enumerate(garbage.values()):
            producer.produce(commands, key=f"garbage-{i}".encode(), value=value, headers=headers)
        producer.produce(commands, key=None, value=os.urandom(50))  # no key at all
        # A valid command on a partition its session does not hash to.
        sid = "wrong-partition"
        home = partition_for(sid, PARTITIONS)
        wrong = AppendCommand("rid-wrong", "raw", sid, (draft("session/title", {"t": "x"}),))
        producer.produce(commands, key=sid.encode(), value=encode_command(wrong),
                         partition=(home + 1) % PARTITIONS,
                         headers=[*headers, (HEADER_REQUEST, b"rid-wrong")])  # fmt: skip
        # Record key and session id disagree.
        other = AppendCommand("rid-key", "raw", "sess-x", (draft("session/title", {"t": "x"}),))
        producer.produce(commands, key=b"sess-y", value=encode_command(other),
                         partition=partition_for("sess-y", PARTITIONS),
                         headers=[*headers, (HEADER_REQUEST, b"rid-key")])  # fmt: skip
        # No events at all.
        empty = AppendCommand("rid-empty", "raw", "sess-e", ())
        producer.produce(commands, key=b"sess-e", value=encode_command(empty),
                         headers=[*headers, (HEADER_REQUEST, b"rid-empty")])  # fmt: skip
        assert producer.flush(30) == 0
        wrong_reply, key_reply, empty_reply = (
            r.exception() for r in _replies_for(bad, ["rid-wrong", "rid-key", "rid-empty"])
        )
        assert isinstance(wrong_reply, WrongPartitionError), wrong_reply
        assert isinstance(key_reply, MalformedCommandError), key_reply
        assert isinstance(empty_reply, MalformedCommandError), empty_reply
        expected_dlq = len(garbage) + 1
        wait_for(lambda: len(_dlq(bad)) >= expected_dlq, 60, "every undecodable record in the DLQ")
        time.sleep(1.0)  # keep the good load going a moment after the last bad record
    entries = _dlq(bad)
    for h in entries.values():
        assert h.get("dsh-dlq-service") == b"writer", h
        assert h.get("dsh-dlq-error") and h.get("dsh-dlq-code") and h.get("dsh-dlq-reason"), h
    for h in entries.values():
        print("BADINPUT raw dlq |", h["dsh-dlq-error"].decode(), "|", h["dsh-dlq-code"].decode(),
              "|", h["dsh-dlq-reason"].decode()[:80])  # fmt: skip
    for reply in (wrong_reply, key_reply, empty_reply):
        print("BADINPUT raw reply |", type(reply).__name__, "|", reply.code)
    verdict = check_history(bad.kafka, history)
    verdict.assert_clean()
    verify_all(bad, redis_client, good, 60)
    record_figures("bad input: raw commands", GOOD_LOAD, verdict, dlq_entries=len(entries),
                   typed_replies=3)  # fmt: skip


# -- fuzzing ------------------------------------------------------------------------------


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    )


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=20),
    _containers,
    max_leaves=20,
)
_types = st.sampled_from(
    ["user/message", "assistant/message", "tool/result", "system/message", "turn/start",
     "turn/end", "step/start", "step/end", "tool/call", "request/header", "session/title",
     "image/offload", "x/unknown", "", "no-slash"]
) | st.text(max_size=12)  # fmt: skip
_ops = st.one_of(
    st.none(),
    st.just("append"),
    st.text(max_size=8),
    st.fixed_dictionaries(
        {"op": st.sampled_from(["replace", "x"]), "startSeq": st.integers(-3, 12),
         "endSeq": st.integers(-3, 12)}
    ),
)  # fmt: skip
_drafts = st.builds(
    lambda t, d, op, src, ign: (
        {"type": t, "data": d}
        | ({} if op is None else {"surfaceOp": op})
        | ({} if src is None else {"sourceEventSeqs": src})
        | ({"ignorable": True} if ign else {})
    ),
    _types,
    _json,
    _ops,
    st.none() | st.lists(st.integers(-2, 15), max_size=4),
    st.booleans(),
)
FUZZ_EXAMPLES = int(os.environ.get("DSH_RELIABILITY_FUZZ_EXAMPLES", "100"))


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(events=st.lists(_drafts, min_size=0, max_size=4), session_no=st.integers(0, 5))
def test_fuzzed_commands_are_committed_or_rejected_with_a_type(
    bad: Namespace, bad_client: SessionClient, events: list[dict[str, Any]], session_no: int
) -> None:
    sid = f"fuzz-{session_no}"
    try:
        committed = bad_client.append_many(sid, events, timeout=30)
    except SessionError as exc:
        assert exc.code and type(exc).__name__ not in ("AppendTimeoutError",), exc
        return
    assert [e.type for e in committed] == [e["type"] for e in events]


def test_after_the_fuzzing_everything_still_serves_and_verifies(
    bad: Namespace, bad_client: SessionClient, redis_client: redis.Redis
) -> None:
    """Runs after the fuzzer: the pipeline serves, and what the fuzzer committed restores
    with the core and verifies in all three projections."""
    ev = bad_client.append("canary", "session/title", {"t": "still here"})
    assert ev.seq >= 0
    fuzzed = [f"fuzz-{i}" for i in range(6)]
    for sid in fuzzed:
        events = bad_client.read(sid).events()
        dsh.Session.from_restore(sid, events)
    verify_all(bad, redis_client, [*fuzzed, "canary"], 60)
    # Undecodable or not, nothing reached the projectors' DLQ: the writer let no bad event by.
    assert all(dict(m.headers() or []).get("dsh-dlq-service") == b"writer" for m in
               read_topic(bad.kafka, bad.kafka.topic("dlq")))  # fmt: skip
