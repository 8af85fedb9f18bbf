"""The writer's command handler without Kafka (``producers/writer/commands.py``): one command
record in, the records it puts into the transaction out, read back with the codec. A table of
what a command can be, and what the writer must publish for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import dsh
from producers.tenancy import Tenancy, tenant_headers
from producers.writer.commands import (
    MAX_REQUEST_ID_CHARS,
    READ_REPLY_BYTES,
    CommandHandler,
    Placement,
)
from producers.writer.journal import REPLY, SNAPSHOT, Kind
from producers.writer.residency import Budget
from producers.writer.snapshots import Snapshots
from producers.writer.state import Limits, PartitionState, rebuild
from schemas import (
    HEADER_INHERITED,
    HEADER_INVARIANTS,
    HEADER_READ_FROM,
    HEADER_READ_NEXT,
    SESSION_EVENT,
    AppendCommand,
    Codec,
    SchemaStore,
    decode_event,
    decode_reply,
    decode_snapshot,
    default_store,
    draft,
    encode_command,
    header,
)
from schemas.store import HISTORY_DIR, SCHEMA_FILES
from servicekit.kafka_clients import MAX_RECORD_BYTES
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from servicekit.topics import Topics
from tests.support.builders import assistant, user

TOPICS = Topics.of(KafkaSettings(topic_prefix="t"))
PARTITIONS = 4
SID = "s-1"
HOME = partition_for(SID, PARTITIONS)


@dataclass
class Record:
    """A consumed command record, as the handler reads it."""

    _value: bytes | None
    _key: bytes | None
    _partition: int = HOME
    _offset: int = 7
    _headers: list[tuple[str, bytes]] = field(default_factory=list)

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def topic(self) -> str:
        return TOPICS.commands

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers


@dataclass
class Put:
    topic: str
    value: bytes | None
    key: bytes | None
    partition: int
    kind: Kind
    request_id: bytes | None


class ListOutbox:
    def __init__(self) -> None:
        self.records: list[Put] = []

    def put(
        self,
        serves: int,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        kind: Kind,
        request_id: bytes | None = None,
    ) -> None:
        assert serves == HOME or topic == TOPICS.dlq
        self.records.append(Put(topic, value, key, partition, kind, request_id))

    def on(self, topic: str) -> list[Put]:
        return [r for r in self.records if r.topic == topic]

    def reply(self) -> Any:
        (reply,) = self.on(TOPICS.replies)
        assert reply.kind == REPLY
        return decode_reply(reply.value or b"")


def handler(
    tenancy: Tenancy | None = None,
    max_event_bytes: int = 1 << 18,
    snapshot_every: int = 1000,
    max_snapshot_bytes: int = 1 << 20,
) -> CommandHandler:
    snapshots = Snapshots(
        TOPICS.snapshots,
        snapshot_every=snapshot_every,
        checkpoint_every=0,
        max_snapshot_bytes=max_snapshot_bytes,
        events_end=lambda _: 0,
    )
    limits = Limits(max_event_bytes, 1 << 19)
    return CommandHandler(TOPICS, Placement(PARTITIONS, 2), limits, snapshots, tenancy)


def command(
    rid: str = "r1",
    drafts: Sequence[dict[str, Any]] | None = None,
    expected_seq: int | None = None,
    session_id: str = SID,
) -> bytes:
    if drafts is None:
        drafts = [draft("user/message", user("u1"), surface_op="append")]
    return encode_command(AppendCommand(rid, "client-1", session_id, tuple(drafts), expected_seq))


def handle(h: CommandHandler, state: PartitionState, record: Record) -> ListOutbox:
    outbox = ListOutbox()
    h.handle(record, state, outbox)
    return outbox


REJECTIONS = [
    # (what is wrong, the record, the error class, its code)
    ("key is not the session", Record(command(), b"other"), "MalformedCommandError", None),
    (
        "wrong partition",
        Record(command(), SID.encode(), (HOME + 1) % PARTITIONS),
        "WrongPartitionError",
        None,
    ),
    ("no events", Record(command(drafts=[]), SID.encode()), "MalformedCommandError", None),
    (
        "a request id over the limit",
        Record(command(rid="r" * (MAX_REQUEST_ID_CHARS + 1)), SID.encode()),
        "MalformedCommandError",
        None,
    ),
    (
        "expected seq is not next",
        Record(command(expected_seq=3), SID.encode()),
        "ConflictError",
        "EXPECTED_SEQ_MISMATCH",
    ),
    (
        "a surface event without surfaceOp",
        Record(command(drafts=[draft("user/message", user("u1"))]), SID.encode()),
        "SurfaceError",
        "SURFACE_OP_REQUIRED",
    ),
    (
        "an assistant message outside a turn",
        Record(
            command(
                drafts=[
                    draft(
                        "assistant/message",
                        {"turn": 1, "step": 1, "message": user("a1"), "stream": []},
                        surface_op="append",
                    )
                ]
            ),
            SID.encode(),
        ),
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("record", "error", "code"),
    [pytest.param(r, e, c, id=name) for name, r, e, c in REJECTIONS],
)
def test_a_refused_command_publishes_only_its_rejection(
    record: Record, error: str | None, code: str | None
) -> None:
    state = PartitionState(HOME)
    out = handle(handler(), state, record)
    assert out.on(TOPICS.events) == [] and out.on(TOPICS.dlq) == []
    raised = out.reply().exception()
    assert raised is not None
    if error is not None:
        assert type(raised).__name__ == error
    if code is not None:
        assert raised.code == code
    assert all(len(s.session) == 0 for s in state.sessions.values())


def test_a_command_publishes_its_events_and_a_reply_that_carries_them() -> None:
    state = PartitionState(HOME)
    drafts = [draft("user/message", user(f"u{i}"), surface_op="append") for i in range(3)]
    out = handle(handler(), state, Record(command(drafts=drafts), SID.encode()))
    events = out.on(TOPICS.events)
    assert [decode_event(e.value or b"").event["seq"] for e in events] == [0, 1, 2]
    assert {(e.key, e.partition, e.request_id) for e in events} == {(SID.encode(), HOME, b"r1")}
    assert [e.kind for e in events] == ["user/message"] * 3
    reply = out.reply()
    assert reply.exception() is None and [r.event["seq"] for r in reply.events] == [0, 1, 2]
    assert len(state.sessions[SID].session) == 3


def test_a_retried_request_is_answered_from_the_log_and_appends_nothing() -> None:
    state, h = PartitionState(HOME), handler()
    first = handle(h, state, Record(command(), SID.encode()))
    again = handle(h, state, Record(command(), SID.encode(), _offset=8))
    assert again.on(TOPICS.events) == []
    assert again.on(TOPICS.replies)[0].value == first.on(TOPICS.replies)[0].value
    assert len(state.sessions[SID].session) == 1


def test_a_retried_rejection_is_the_same_rejection_even_if_it_would_commit_now() -> None:
    state, h = PartitionState(HOME), handler()
    refused = handle(h, state, Record(command("r9", expected_seq=1), SID.encode()))
    handle(h, state, Record(command("r1"), SID.encode()))  # the session is now at seq 1
    again = handle(h, state, Record(command("r9", expected_seq=1), SID.encode()))
    assert again.on(TOPICS.events) == []
    assert again.reply().exception().message == refused.reply().exception().message


def test_an_undecodable_record_goes_to_the_dlq_with_why_and_gets_no_reply() -> None:
    state = PartitionState(HOME)
    record = Record(b"not avro at all", SID.encode(), _headers=[("dsh-type", b"x")])
    out = handle(handler(), state, record)
    (letter,) = out.on(TOPICS.dlq)
    assert out.on(TOPICS.replies) == [] and out.on(TOPICS.events) == []
    assert letter.value == b"not avro at all" and letter.partition == -1
    assert isinstance(letter.kind, list)
    headers = dict(letter.kind)
    assert headers["dsh-dlq-service"] == b"writer"
    assert headers["dsh-dlq-code"] == b"CODEC_BAD_MARKER"
    assert headers["dsh-dlq-source"] == f"{TOPICS.commands}[{HOME}]@7".encode()
    assert headers["dsh-type"] == b"x"  # the record's own headers travel along


def test_an_event_too_large_once_encoded_is_refused_and_leaves_the_session_as_it_was() -> None:
    state, h = PartitionState(HOME), handler(max_event_bytes=600)
    handle(h, state, Record(command("r1"), SID.encode()))
    big = [draft("user/message", user("u2", "x" * 1000), surface_op="append")]
    out = handle(h, state, Record(command("r2", drafts=big), SID.encode()))
    assert out.on(TOPICS.events) == []
    assert out.reply().exception().code == "EVENT_TOO_LARGE"
    assert len(state.sessions[SID].session) == 1 and "r2" not in state.sessions[SID].requests


def test_a_command_refused_once_encoded_is_not_counted_against_the_memory_budget() -> None:
    """Its bytes were counted when the core accepted it: the refusal takes them back, else
    every refused retry would make the session look larger, and evict others for nothing."""
    state, h = PartitionState(HOME), handler(max_event_bytes=600)
    handle(h, state, Record(command("r1"), SID.encode()))
    counted = state.residency.resident_bytes
    events_since_checkpoint = state.events_since_checkpoint
    big = [draft("user/message", user("u2", "x" * 1000), surface_op="append")]
    for i in range(3):
        out = handle(h, state, Record(command(f"r-big-{i}", drafts=big), SID.encode()))
        assert out.reply().exception().code == "EVENT_TOO_LARGE"
    assert state.residency.resident_bytes == counted
    assert state.events_since_checkpoint == events_since_checkpoint
    state.residency.budget = Budget(bytes=counted)
    assert not state.residency.over()


def test_events_too_many_for_one_reply_are_refused_and_every_reply_fits_a_record() -> None:
    """Small events each carry the session id and an envelope: thousands of them in a command
    well under its limit would make a reply over Kafka's record limit, which would fail the
    transaction on every retry."""
    long_sid = next(
        sid for i in range(1000) if partition_for(sid := f"{'s' * 200}-{i}", PARTITIONS) == HOME
    )
    state, h = PartitionState(HOME), handler()
    many = [draft("vendor/tick", {}, ignorable=True) for _ in range(5000)]
    value = command("r-many", drafts=many, session_id=long_sid)
    assert len(value) < 1 << 19  # the command is within its own limit
    out = handle(h, state, Record(value, long_sid.encode()))
    assert out.on(TOPICS.events) == []
    refused = out.reply().exception()
    assert refused.code == "COMMAND_TOO_LARGE" and "smaller commands" in refused.message
    assert long_sid not in state.sessions
    fewer = handle(
        h,
        state,
        Record(command("r-fewer", drafts=many[:500], session_id=long_sid), long_sid.encode()),
    )
    assert len(fewer.on(TOPICS.events)) == 500
    assert all(len(r.value or b"") < MAX_RECORD_BYTES for r in out.records + fewer.records)


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ([], "TENANT_MISSING"),
        (tenant_headers("globex", b"k2", command()), "TENANT_UNKNOWN"),
        (tenant_headers("acme", b"wrong", command()), "TENANT_BAD_MAC"),
        (tenant_headers("acme", b"k1", command()), "TENANT_PREFIX_FORBIDDEN"),
    ],
)
def test_a_tenant_credential_that_does_not_allow_the_session_is_refused(
    headers: list[tuple[str, bytes]], code: str
) -> None:
    tenancy = Tenancy.parse("acme=acme-", "acme=k1")
    out = handle(
        handler(tenancy), PartitionState(HOME), Record(command(), SID.encode(), _headers=headers)
    )
    assert out.on(TOPICS.events) == [] and out.reply().exception().code == code


def test_a_session_is_snapshotted_every_n_events_in_the_same_transaction() -> None:
    state, h = PartitionState(HOME), handler(snapshot_every=4)
    drafts = [draft("user/message", user(f"u{i}"), surface_op="append") for i in range(2)]
    first = handle(h, state, Record(command("r1", drafts=drafts), SID.encode()))
    second = handle(h, state, Record(command("r2", drafts=drafts), SID.encode()))
    assert first.on(TOPICS.snapshots) == []
    (snapshot,) = second.on(TOPICS.snapshots)
    assert snapshot.kind == SNAPSHOT and snapshot.key == SID.encode()
    assert state.sessions[SID].events_since_snapshot == 0


def test_a_session_too_large_to_snapshot_is_not_built_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, h = PartitionState(HOME), handler(snapshot_every=2, max_snapshot_bytes=100)
    drafts = [draft("user/message", user(f"u{i}"), surface_op="append") for i in range(2)]
    first = handle(h, state, Record(command("r1", drafts=drafts), SID.encode()))
    assert first.on(TOPICS.snapshots) == [] and state.sessions[SID].oversized

    def built(self: Any) -> bytes:
        raise AssertionError("a snapshot only grows: it was too large, it still is")

    monkeypatch.setattr(type(state.sessions[SID]), "snapshot", built)
    second = handle(h, state, Record(command("r2", drafts=drafts), SID.encode()))
    assert second.on(TOPICS.snapshots) == []
    assert state.sessions[SID].events_since_snapshot == 0


def _read(rid: str, start: str, partition: int = HOME) -> Record:
    headers = [(HEADER_READ_FROM, start.encode())]
    return Record(command(rid, drafts=[]), SID.encode(), partition, _headers=headers)


def _read_reply(out: ListOutbox) -> tuple[Any, str | None]:
    (put,) = out.on(TOPICS.replies)
    assert isinstance(put.kind, list)  # its own headers: the reply's, and where to go on
    following = header(put.kind, HEADER_READ_NEXT)
    return decode_reply(put.value or b""), following


def test_a_read_is_answered_from_memory_in_parts_and_changes_nothing() -> None:
    state = PartitionState(HOME)
    h = handler()
    big = "x" * (READ_REPLY_BYTES // 3)
    for i in range(7):
        drafts = [draft("user/message", user(f"u{i}", big), surface_op="append")]
        handle(h, state, Record(command(f"append-{i}", drafts), SID.encode()))
    assert len(state.sessions[SID].session) == 7
    requests = dict(state.sessions[SID].requests)

    seqs: list[int] = []
    start: str | None = "0"
    replies = 0
    while start is not None:
        out = handle(h, state, _read(f"read-{replies}", start))
        assert out.on(TOPICS.events) == [] and out.on(TOPICS.snapshots) == []
        reply, start = _read_reply(out)
        assert reply.exception() is None
        seqs += [r.event["seq"] for r in reply.events]
        replies += 1
    assert seqs == list(range(7))  # every event once, in order
    assert replies == 4  # at most 512 KiB a reply: two events of a third of it each
    assert state.sessions[SID].requests == requests and len(state.sessions[SID].session) == 7

    tail, following = _read_reply(handle(h, state, _read("read-tail", "5")))
    assert [r.event["seq"] for r in tail.events] == [5, 6] and following is None


def test_a_read_of_an_unknown_session_is_empty_and_keeps_no_state() -> None:
    state = PartitionState(HOME)
    reply, following = _read_reply(handle(handler(), state, _read("r", "0")))
    assert reply.exception() is None and not reply.events and following is None
    assert SID not in state.sessions


@pytest.mark.parametrize(
    ("record", "error"),
    [
        (_read("r", "0", (HOME + 1) % PARTITIONS), "WrongPartitionError"),
        (_read("r", "-1"), "MalformedCommandError"),
        (_read("r", "one"), "MalformedCommandError"),
    ],
    ids=["wrong partition", "a negative seq", "not a number"],
)
def test_a_read_that_may_not_be_answered_is_refused(record: Record, error: str) -> None:
    reply, _ = _read_reply(handle(handler(), PartitionState(HOME), record))
    raised = reply.exception()
    assert raised is not None and type(raised).__name__ == error


def test_the_events_a_fork_inherited_carry_a_header_saying_so() -> None:
    parent = dsh.Session.create("parent", clock=lambda: 1)
    parent.append("turn/start", {"turn": 1})
    parent.append("user/message", user("u1"), surface_op="append")
    parent.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    child = parent.fork(SID)
    wire = [
        {k: v for k, v in e.to_json().items() if k not in ("seq", "time")} for e in child.events()
    ]
    state, h = PartitionState(HOME), handler()
    out = handle(h, state, Record(command("fork", wire, expected_seq=0), SID.encode()))
    marks = [
        header(e.kind, HEADER_INHERITED) if isinstance(e.kind, list) else None
        for e in out.on(TOPICS.events)
    ]
    assert marks == ["1", "1", "1", None]  # the parent's three, not the end-seed marker
    # Its own events later, and any other session's, carry none.
    drafts = [draft("turn/start", {"turn": 2})]
    later = handle(h, state, Record(command("own", drafts), SID.encode()))
    assert [e.kind for e in later.on(TOPICS.events)] == ["turn/start"]
    other = handle(h, PartitionState(HOME), Record(command("plain"), SID.encode()))
    assert all(isinstance(e.kind, str) for e in other.on(TOPICS.events))


# An assistant message with no turn open: only the turn invariants refuse it.
_OUTSIDE_A_TURN = draft("assistant/message", assistant(), surface_op="append")


def _mode(value: bytes) -> list[tuple[str, bytes]]:
    return [(HEADER_INVARIANTS, value)]


def test_a_session_created_with_invariants_off_keeps_that_mode_and_records_it() -> None:
    state, h = PartitionState(HOME), handler(snapshot_every=2)
    out = handle(
        h, state, Record(command("r1", [_OUTSIDE_A_TURN]), SID.encode(), _headers=_mode(b"off"))
    )
    assert out.reply().exception() is None
    (first,) = out.on(TOPICS.events)
    assert isinstance(first.kind, list) and header(first.kind, HEADER_INVARIANTS) == "off"
    # Later commands need not say it; their events carry no mode (the first one records it).
    later = handle(h, state, Record(command("r2", [_OUTSIDE_A_TURN]), SID.encode()))
    assert later.reply().exception() is None
    assert [e.kind for e in later.on(TOPICS.events)] == ["assistant/message"]
    (snapshot,) = later.on(TOPICS.snapshots)
    assert decode_snapshot(snapshot.value or b"").state == {"invariants": False}
    # A command that asks for the other mode is refused: the mode is fixed at creation.
    asks_on = Record(command("r3"), SID.encode(), _headers=_mode(b"on"))
    refused = handle(h, state, asks_on).reply().exception()
    assert refused is not None and refused.code == "INVARIANTS_MODE"
    assert len(state.sessions[SID].session) == 2


def test_the_default_mode_is_on_and_a_session_is_only_created_by_a_committed_append() -> None:
    state, h = PartitionState(HOME), handler()
    on = handle(h, state, Record(command("r1", [_OUTSIDE_A_TURN]), SID.encode()))
    assert on.reply().exception() is not None  # the invariants refuse it
    # Only a rejected command touched the session: the next one's mode decides.
    bare = Record(command("r2", [_OUTSIDE_A_TURN]), SID.encode(), _headers=_mode(b"off"))
    assert handle(h, state, bare).reply().exception() is None
    assert state.sessions[SID].session.invariants is False
    # And the other way round: a refused "off" command leaves no bare session behind.
    other = PartitionState(HOME)
    too_big = Record(command("r3", expected_seq=5), SID.encode(), _headers=_mode(b"off"))
    assert handle(h, other, too_big).reply().exception() is not None
    assert handle(h, other, Record(command("r4"), SID.encode())).reply().exception() is None
    assert other.sessions[SID].session.invariants is True
    assert all(
        isinstance(e.kind, str)
        for e in handle(h, PartitionState(HOME), Record(command("r5"), SID.encode())).on(
            TOPICS.events
        )
    )


def test_a_mode_header_other_than_on_or_off_is_a_malformed_command() -> None:
    state = PartitionState(HOME)
    out = handle(handler(), state, Record(command(), SID.encode(), _headers=_mode(b"no")))
    refused = out.reply().exception()
    assert refused is not None and refused.code == "MALFORMED_COMMAND"
    assert out.on(TOPICS.events) == []


def test_a_read_of_a_bare_session_says_its_mode() -> None:
    state, h = PartitionState(HOME), handler()
    handle(h, state, Record(command("r1", [_OUTSIDE_A_TURN]), SID.encode(), _headers=_mode(b"off")))
    (put,) = handle(h, state, _read("read", "0")).on(TOPICS.replies)
    assert isinstance(put.kind, list) and header(put.kind, HEADER_INVARIANTS) == "off"


def test_a_command_of_an_earlier_schema_is_published_in_the_current_one() -> None:
    """A client not yet upgraded still appends: its command decodes through the shipped
    history, and the events go out in the current version, typed where it types them."""
    old = Codec(SchemaStore.from_files(HISTORY_DIR / "v1" / f for f in SCHEMA_FILES))
    drafts = [draft("compaction/start", {"reason": "context window", "turns": [1, 2]})]
    value = encode_command(AppendCommand("r1", "client-1", SID, tuple(drafts), None), codec=old)
    out = handle(handler(), PartitionState(HOME), Record(value, SID.encode()))
    (event,) = out.on(TOPICS.events)
    current = default_store().current(SESSION_EVENT).fingerprint
    assert (event.value or b"")[2:10] == current != value[2:10]
    assert decode_event(event.value or b"").event["data"] == drafts[0]["data"]


# Optional fields a client may write out as false or null: the core takes each as absent, so
# the logged event must say absent too, or the session's log does not restore.
_EXPLICIT_FALSY: list[dict[str, Any]] = [
    {"type": "turn/start", "data": {"turn": 1}, "ignorable": False},
    {"type": "step/start", "data": {"turn": 1, "step": 1}, "surfaceOp": None},
    {"type": "user/message", "data": user("u1"), "surfaceOp": "append", "sourceEventSeqs": None},
]


@pytest.mark.parametrize("schema", ["current", "v1"], ids=["spliced bytes", "re-encoded"])
def test_explicit_falsy_optional_fields_are_logged_as_absent_and_the_log_restores(
    schema: str,
) -> None:
    codec = (
        None
        if schema == "current"
        else Codec(SchemaStore.from_files(HISTORY_DIR / "v1" / f for f in SCHEMA_FILES))
    )
    command = AppendCommand("r1", "client-1", SID, tuple(_EXPLICIT_FALSY), None)
    state = PartitionState(HOME)
    out = handle(handler(), state, Record(encode_command(command, codec=codec), SID.encode()))
    assert out.reply().exception() is None
    logged = [decode_event(e.value or b"").event for e in out.on(TOPICS.events)]
    assert all("ignorable" not in e for e in logged)
    assert [e.event for e in out.reply().events] == logged
    # What a restore, a takeover or an eviction's reload does with the log.
    restored = rebuild(SID, logged, {})
    assert restored.events() == state.sessions[SID].session.events()


def _new_sessions(n: int) -> list[str]:
    """``n`` session ids that live on partition HOME."""
    home = (
        sid
        for sid in (f"new-{i}" for i in range(100_000))
        if partition_for(sid, PARTITIONS) == HOME
    )
    return [next(home) for _ in range(n)]


def test_rejected_first_commands_leave_no_session_behind_and_a_retry_gets_its_rejection() -> None:
    state, h = PartitionState(HOME), handler()
    sids = _new_sessions(50)
    first = {
        # The turn invariants refuse an assistant message outside a turn.
        sid: handle(
            h, state, Record(command("r1", [_OUTSIDE_A_TURN], session_id=sid), sid.encode())
        )
        .reply()
        .exception()
        for sid in sids
    }
    assert all(e is not None and e.code == "NO_OPEN_TURN" for e in first.values())
    assert state.sessions == {} and len(state.residency) == 0 and not state.dirty
    h.snapshots.after_batch(state, ListOutbox())  # the rejections' transaction...
    state.rejections.committed()  # ...commits
    # Remembered, not validated again: the retry gets it even with events that would commit.
    retry = Record(command("r1", session_id=sids[7]), sids[7].encode())
    again = handle(h, state, retry).reply().exception()
    assert again is not None and again.to_wire() == first[sids[7]].to_wire()
    assert state.sessions == {}
    # The id is not spoiled: a good command creates the session.
    created = handle(h, state, Record(command("r2", session_id=sids[7]), sids[7].encode()))
    assert created.reply().exception() is None and len(state.sessions[sids[7]].session) == 1


def test_a_first_command_refused_once_encoded_leaves_no_session_behind() -> None:
    state, h = PartitionState(HOME), handler(max_event_bytes=600)
    big = [draft("user/message", user("u1", "x" * 1000), surface_op="append")]
    out = handle(h, state, Record(command("r1", drafts=big), SID.encode()))
    assert out.reply().exception().code == "EVENT_TOO_LARGE"
    assert state.sessions == {} and len(state.residency) == 0 and not state.dirty
    assert state.residency.resident_bytes == 0


def test_a_rejection_keeps_a_session_whose_events_are_not_committed_yet() -> None:
    state, h = PartitionState(HOME), handler()
    handle(h, state, Record(command("r1"), SID.encode()))  # in the open transaction
    out = handle(h, state, Record(command("r2", expected_seq=5), SID.encode()))
    assert out.reply().exception().code == "EXPECTED_SEQ_MISMATCH"
    assert len(state.sessions[SID].session) == 1 and SID in state.dirty
