"""The writer's zero-re-encode path: an append command decoded together with the byte span of
each draft, so that each committed event's record is *assembled* from the command's own bytes
instead of encoded again from the values.

Avro makes this exact. A draft (``EventDraft``: type, data, surfaceOp, sourceEventSeqs,
ignorable) and a committed event (``SessionEvent``: sessionId, formatVersion, type, seq, time,
then the same four fields with the same types) differ only by the envelope fields the writer
adds; a record is the concatenation of its fields' encodings, so an event's body is

    sessionId · formatVersion · <the draft's type bytes> · seq · time · <the draft's tail bytes>

The layout is checked against the schemas when this module first runs; if a schema change ever
breaks it, :data:`SPLICEABLE` is False and every caller falls back to encoding the values. A
command written with another version of the command schema is decoded through the codec's
schema resolution as usual and gets no frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from dsh.event import SESSION_FORMAT_VERSION
from schemas.avro_io import long_bytes
from schemas.avro_read import read_block_count, read_long, read_str
from schemas.codec import HEADER_SIZE
from schemas.readers import compile_reader
from schemas.records import AppendCommand, decode_command
from schemas.store import APPEND_COMMAND, SESSION_EVENT, MessageSchema, default_store

_DRAFT = "dsh.v1.EventDraft"
_COMMAND = (
    ("requestId", "string"),
    ("clientId", "string"),
    ("sessionId", "string"),
    ("expectedSeq", ["null", "long"]),
    ("events", {"array": _DRAFT}),
)
_ENVELOPE = (
    ("sessionId", "string"),
    ("formatVersion", "int"),
    ("type", "string"),
    ("seq", "long"),
    ("time", "long"),
)


@dataclass(frozen=True, slots=True)
class DraftFrame:
    """Where one draft sits in its command's bytes: ``type`` is the encoded type field
    (length + UTF-8), ``tail`` the encoded fields after it, both exactly as the client wrote
    them."""

    type: bytes
    tail: bytes


def _field_shape(node: Any) -> Any:
    """A field type with named types reduced to their names: two schemas that inline the same
    named type at different places still compare equal."""
    if isinstance(node, list):
        return [_field_shape(n) for n in node]
    if isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed"):
            return node["name"]
        if node.get("type") == "array":
            return {"array": _field_shape(node["items"])}
        if node.get("type") == "map":
            return {"map": _field_shape(node["values"])}
        return _field_shape(node["type"])
    return node


def _draft_schema(command: MessageSchema) -> dict[str, Any] | None:
    for f in command.schema["fields"]:
        if f["name"] == "events":
            items = f["type"]["items"]
            if isinstance(items, dict) and items.get("name") == _DRAFT:
                return items
    return None


def _spliceable(command: MessageSchema, event: MessageSchema) -> bool:
    draft = _draft_schema(command)
    if draft is None:
        return False
    command_fields = [(f["name"], _field_shape(f["type"])) for f in command.schema["fields"]]
    draft_fields = [(f["name"], _field_shape(f["type"])) for f in draft["fields"]]
    event_fields = [(f["name"], _field_shape(f["type"])) for f in event.schema["fields"]]
    return (
        command_fields == list(_COMMAND)  # what _decode_framed reads by hand
        and event_fields[: len(_ENVELOPE)] == list(_ENVELOPE)
        and draft_fields[:1] == [("type", "string")]
        and draft_fields[1:] == event_fields[len(_ENVELOPE) :]
    )


@dataclass(frozen=True)
class _Plan:
    command_header: bytes
    event_header: bytes
    read_draft: Callable[[bytes, int], tuple[Any, int]]


def _schemas() -> tuple[MessageSchema, MessageSchema]:
    store = default_store()
    return store.current(APPEND_COMMAND), store.current(SESSION_EVENT)


def draft_reader_schema() -> dict[str, Any] | None:
    """The schema the drafts are read with, as the root of a frozen reader (its own dict stays
    plain, its data comes out frozen), when the schemas are spliceable. It is self-contained:
    the store inlines named types at their first use, all inside it. The native build compiles
    this reader too (schemas.native_build)."""
    command, event = _schemas()
    return _draft_schema(command) if _spliceable(command, event) else None


@cache
def _plan() -> _Plan | None:
    draft = draft_reader_schema()
    if draft is None:
        return None
    command, event = _schemas()
    # Compiled at the first command, not at import: the process has set up its codec and its
    # logging by then (schemas.native reports which readers it runs).
    return _Plan(command.header, event.header, compile_reader(draft, frozen=True))


SPLICEABLE = _spliceable(*_schemas())
_FORMAT_VERSION = long_bytes(SESSION_FORMAT_VERSION)


def decode_command_frames(data: bytes) -> tuple[AppendCommand, tuple[DraftFrame, ...] | None]:
    """:func:`schemas.decode_command`, plus each draft's frame when the command was written
    with the current schema. The drafts' ``data`` (and every object or array in them) comes out
    as the core's FrozenDict / FrozenList, so ``Session.append`` takes it without a copy.

    Anything unusual — another schema version, a JsonValue nested too deep for the frozen
    reader, bytes that do not decode — takes the codec's own path, so errors are exactly
    :func:`decode_command`'s."""
    plan = _plan()
    if plan is not None and data[:HEADER_SIZE] == plan.command_header:
        try:
            return _decode_framed(data, plan.read_draft)
        except Exception:  # the codec's path below names the error exactly
            pass
    return decode_command(data), None


def _decode_framed(
    data: bytes, read_draft: Callable[[bytes, int], tuple[Any, int]]
) -> tuple[AppendCommand, tuple[DraftFrame, ...]]:
    request_id, pos = read_str(data, HEADER_SIZE)
    client_id, pos = read_str(data, pos)
    session_id, pos = read_str(data, pos)
    branch = data[pos]
    pos += 1
    expected_seq: int | None = None
    if branch == 2:
        expected_seq, pos = read_long(data, pos)
    elif branch != 0:
        raise ValueError("bad union index")
    drafts: list[Any] = []
    frames: list[DraftFrame] = []
    n, pos = read_block_count(data, pos)
    while n:
        for _ in range(n):
            start = pos
            _, after_type = read_str(data, pos)
            draft, pos = read_draft(data, pos)
            drafts.append(draft)
            frames.append(DraftFrame(data[start:after_type], data[after_type:pos]))
        n, pos = read_block_count(data, pos)
    if pos != len(data):
        raise ValueError("trailing bytes")
    command = AppendCommand(request_id, client_id, session_id, tuple(drafts), expected_seq)
    return command, tuple(frames)


def event_value(session_prefix: bytes, frame: DraftFrame, seq: int, time_ms: int) -> bytes:
    """The ``dsh.session.events`` value of the committed draft ``frame``: byte for byte what
    :func:`schemas.encode_event` writes for the same event when the client used this codec
    (another client's choice of union branch is kept as it wrote it; both decode alike).
    ``session_prefix`` comes from :func:`event_prefix`, once per command."""
    return b"".join((session_prefix, frame.type, long_bytes(seq), long_bytes(time_ms), frame.tail))


def event_prefix(session_id: str) -> bytes:
    """Header, session id and format version: the part of an event's value before its type."""
    plan = _plan()
    assert plan is not None, "event_prefix needs SPLICEABLE schemas"
    sid = session_id.encode()
    return plan.event_header + long_bytes(len(sid)) + sid + _FORMAT_VERSION


__all__ = [
    "SPLICEABLE",
    "DraftFrame",
    "decode_command_frames",
    "event_prefix",
    "event_value",
]
