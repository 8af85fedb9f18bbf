"""The shipped schema history (``schemas/history``): each earlier version of the file set is
frozen as it shipped, the packaged store still knows its fingerprints, and its records decode
into the current version, so topics written before an upgrade stay readable after it. Version
2 types what version 1 left to JsonValue: failed attempts, compaction markers, image offloads
and tool-call stream deltas."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest
from hypothesis import given

import schemas
from schemas.store import (
    APPEND_COMMAND,
    APPEND_REPLY,
    HISTORY,
    HISTORY_DIR,
    SCHEMA_FILES,
    SESSION_EVENT,
    WRITER_SNAPSHOT,
    SchemaStore,
    default_store,
)
from tests.unit.test_codec_roundtrip import PROPS, any_events

# As v1 shipped (its golden vectors said so): these never change.
V1_FINGERPRINTS = {
    SESSION_EVENT: "a98cad53282fcd0b",
    APPEND_COMMAND: "8cc014b521a7dd68",
    APPEND_REPLY: "22acda536c2aa72e",
    WRITER_SNAPSHOT: "66af5d0c7778a59d",
}

V1 = schemas.Codec(SchemaStore.from_files(HISTORY_DIR / "v1" / f for f in SCHEMA_FILES))
CURRENT = schemas.Codec(default_store())

STREAMED_CALL = [
    {"t": 0, "kind": "tool-call", "id": "c1", "name": "ls"},
    {"t": 9, "kind": "tool-call", "id": "c1", "argumentsDelta": '{"path":'},
]
NEWLY_TYPED = [
    # (event type, data, the record version 2 gives it)
    (
        "assistant/attempt",
        {"turn": 1, "step": 1, "stream": [], "error": {"code": "OVERLOADED", "retryInMs": 250}},
        "dsh.v1.AssistantAttemptData",
    ),
    (
        "compaction/start",
        {"reason": "context window", "turns": [1, 10]},
        "dsh.v1.CompactionStartData",
    ),
    ("compaction/end", {"summary": 125, "replaced": 38}, "dsh.v1.CompactionEndData"),
    ("image/offload", {"seqs": [111], "ref": "blob://demo/1"}, "dsh.v1.ImageOffloadData"),
    (
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "message": {
                "id": "a1",
                "role": "assistant",
                "content": [],
                "source": {"kind": "model", "provider": "p", "model": "m"},
            },
            "stream": STREAMED_CALL,
        },
        "dsh.v1.AssistantMessageData",
    ),
]


def _event(type_: str, data: Any) -> dict[str, Any]:
    return {"type": type_, "seq": 3, "time": 1700000000000, "data": data}


def _data_branch(value: bytes) -> tuple[str, Any]:
    """The Avro branch the event's data took, and its value, read as any Avro library would."""
    writer = CURRENT.store.by_fingerprint(value[2:10])
    datum: Any = fastavro.schemaless_reader(
        io.BytesIO(value[10:]), writer.parsed, return_record_name=True
    )
    branch: tuple[str, Any] = datum["data"]
    return branch


def test_every_shipped_version_is_frozen_and_known_to_the_packaged_store() -> None:
    assert HISTORY == ("v1",)
    for name, fingerprint in V1_FINGERPRINTS.items():
        assert V1.store.current(name).fingerprint.hex() == fingerprint, name
        assert default_store().by_fingerprint(bytes.fromhex(fingerprint)).name == name
        # The packaged store writes and reads the newest version.
        assert default_store().current(name).fingerprint.hex() != fingerprint


@PROPS
@given(ev=any_events)
def test_any_event_written_with_v1_decodes_into_the_current_version(ev: dict[str, Any]) -> None:
    old = schemas.encode_event(ev, "s", codec=V1)
    assert old[2:10].hex() == V1_FINGERPRINTS[SESSION_EVENT]
    assert (
        schemas.decode_event(old, codec=CURRENT).event == schemas.decode_event(old, codec=V1).event
    )
    assert schemas.decode_event_frozen(old, codec=CURRENT).event == ev


@pytest.mark.parametrize(("type_", "data", "record"), NEWLY_TYPED, ids=[t[0] for t in NEWLY_TYPED])
def test_what_v1_left_untyped_is_a_typed_record_now_and_both_read_alike(
    type_: str, data: Any, record: str
) -> None:
    event = _event(type_, data)
    new = schemas.encode_event(event, "s", codec=CURRENT)
    branch, value = _data_branch(new)
    assert branch == record
    if type_ == "assistant/message":  # the message was typed before; its deltas were not
        assert [name for name, _ in value["stream"]] == ["dsh.v1.ToolCallDelta"] * 2
    old = schemas.encode_event(event, "s", codec=V1)
    old_branch, old_value = _data_branch(old)
    if type_ == "assistant/message":
        assert [name for name, _ in old_value["stream"]] == ["dsh.v1.JsonValue"] * 2
    else:
        assert old_branch == "dsh.v1.JsonValue"
    for value_ in (new, old):
        assert schemas.decode_event(value_, codec=CURRENT).event == event


def test_commands_replies_and_snapshots_of_v1_decode_into_the_current_version() -> None:
    event = _event("compaction/end", {"summary": 1, "replaced": 2})
    command = schemas.AppendCommand(
        "r", "c", "s", ({"type": "compaction/end", "data": {"summary": 1}},), 0
    )
    assert schemas.decode_command(schemas.encode_command(command, codec=V1)) == command
    reply = schemas.AppendReply.committed("r", "c", "s", [event])
    assert schemas.decode_reply(schemas.encode_reply(reply, codec=V1)) == reply
    snapshot = schemas.WriterSnapshot("s", (event,), (), {"invariants": False}, 3, 3)
    assert schemas.decode_snapshot(schemas.encode_snapshot(snapshot, codec=V1)) == snapshot
