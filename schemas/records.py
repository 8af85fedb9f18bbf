"""The codec API: events, append commands, replies and writer snapshots ⇄ bytes, and the Kafka
record headers. Values cross this edge as wire JSON (camelCase dicts, as ``Event.to_json()``
gives) or as ``dsh.Event``; the typed Python views below are plain frozen dataclasses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple, Protocol

from dsh.errors import SessionError, error_from_wire
from dsh.event import SESSION_FORMAT_VERSION, Event
from schemas.codec import HEADER_SIZE, Codec
from schemas.errors import CorruptRecordError, SchemaMismatchError, UnencodableError
from schemas.store import APPEND_COMMAND, APPEND_REPLY, SESSION_EVENT, WRITER_SNAPSHOT

HEADER_TYPE = "dsh-type"
HEADER_FORMAT = "dsh-format"
# The request id of an append command, on the command and on every event and reply it made.
HEADER_REQUEST = "dsh-request-id"
# A command with no events and this header (a seq, in ASCII) is a read: the writer answers with
# the session's events from that seq; a reply that stops short names the next seq to ask for.
HEADER_READ_FROM = "dsh-read-from"
HEADER_READ_NEXT = "dsh-read-next"
# On an event a fork copied from its parent (before its session/end-seed marker): "1".
HEADER_INHERITED = "dsh-inherited"
# A session's invariants mode ("on" | "off"), fixed when it is created. On a command: the mode
# the command creates its session with (or expects it to have). On the events topic: "off" on
# a bare session's first event (seq 0); no header there means on. On a read's reply: "off".
HEADER_INVARIANTS = "dsh-invariants"
INVARIANTS_VALUES = {"on": True, "off": False}


def invariants_header(invariants: bool) -> tuple[str, bytes]:
    return HEADER_INVARIANTS, b"on" if invariants else b"off"


class _ToJson(Protocol):
    def to_json(self) -> dict[str, Any]: ...


EventLike = _ToJson | Mapping[str, Any]


@cache
def default_codec() -> Codec:
    return Codec()


_default_codec: Codec | None = None


def _default() -> Codec:
    # The per-event hot path: a global read instead of functools.cache's call.
    global _default_codec
    if _default_codec is None:
        _default_codec = default_codec()
    return _default_codec


def _wire(event: EventLike) -> Mapping[str, Any]:
    if type(event) is dict or isinstance(event, Mapping):  # the ABC check is slow: dicts first
        return event
    return event.to_json()


# --- events ------------------------------------------------------------------------------


class EventRecord(NamedTuple):
    """One decoded ``dsh.session.events`` value. A NamedTuple, not a frozen dataclass: one is
    built per decoded event, and a frozen dataclass' __init__ cost a fifth of decoding."""

    session_id: str
    event: dict[str, Any]  # wire JSON
    format_version: int = SESSION_FORMAT_VERSION

    def to_event(self) -> Event:
        return Event.from_json(self.event)


def encode_event(
    event: EventLike,
    session_id: str,
    *,
    format_version: int = SESSION_FORMAT_VERSION,
    codec: Codec | None = None,
) -> bytes:
    """A committed event as the value of a ``dsh.session.events`` record."""
    wire = event if type(event) is dict else _wire(event)
    if "sessionId" in wire or "formatVersion" in wire:
        raise UnencodableError("event: sessionId/formatVersion are envelope fields, not event keys")
    return (codec or _default()).encode(
        SESSION_EVENT, {**wire, "sessionId": session_id, "formatVersion": format_version}
    )


def decode_event(data: bytes, *, codec: Codec | None = None) -> EventRecord:
    _, v = (codec or _default_codec or _default()).decode(data, SESSION_EVENT)
    return EventRecord(v.pop("sessionId"), v, v.pop("formatVersion"))


def decode_event_frozen(data: bytes, *, codec: Codec | None = None) -> EventRecord:
    """:func:`decode_event` whose ``event["data"]`` (and every object or array in the event) is
    already the core's FrozenDict / FrozenList: ``Event.from_json`` then shares it instead of
    deep-copying it. Same values, same errors; for consumers that build ``dsh.Event``s."""
    _, v = (codec or _default_codec or _default()).decode_frozen(data, SESSION_EVENT)
    return EventRecord(v.pop("sessionId"), v, v.pop("formatVersion"))


def _event_records(events: Iterable[Mapping[str, Any]]) -> tuple[EventRecord, ...]:
    out = []
    for v in events:
        e = dict(v)
        session_id = e.pop("sessionId")
        format_version = e.pop("formatVersion")
        out.append(EventRecord(session_id, e, format_version))
    return tuple(out)


def _event_values(
    events: Iterable[EventRecord | EventLike], session_id: str
) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if isinstance(e, EventRecord):
            out.append({**e.event, "sessionId": e.session_id, "formatVersion": e.format_version})
        else:
            out.append(
                {**_wire(e), "sessionId": session_id, "formatVersion": SESSION_FORMAT_VERSION}
            )
    return out


# --- commands ----------------------------------------------------------------------------


def draft(
    type: str,
    data: Any,
    *,
    surface_op: Any = None,
    source_event_seqs: Sequence[int] | None = None,
    ignorable: bool = False,
) -> dict[str, Any]:
    """An event to append, in wire shape (no seq or time: the writer assigns them).

    ``surface_op`` is "append", a ``dsh.Replace`` (anything with ``to_json``) or its wire dict.
    """
    d: dict[str, Any] = {"type": type, "data": data}
    if surface_op is not None:
        d["surfaceOp"] = surface_op.to_json() if hasattr(surface_op, "to_json") else surface_op
    if source_event_seqs is not None:
        d["sourceEventSeqs"] = list(source_event_seqs)
    if ignorable:
        d["ignorable"] = True
    return d


@dataclass(frozen=True)
class AppendCommand:
    """One ``dsh.session.commands`` value: append ``events`` (drafts) all-or-nothing."""

    request_id: str
    client_id: str
    session_id: str
    events: tuple[dict[str, Any], ...]
    expected_seq: int | None = None


def encode_command(command: AppendCommand, *, codec: Codec | None = None) -> bytes:
    v: dict[str, Any] = {
        "requestId": command.request_id,
        "clientId": command.client_id,
        "sessionId": command.session_id,
        "events": list(command.events),
    }
    if command.expected_seq is not None:
        v["expectedSeq"] = command.expected_seq
    return (codec or default_codec()).encode(APPEND_COMMAND, v)


def decode_command(data: bytes, *, codec: Codec | None = None) -> AppendCommand:
    _, v = (codec or default_codec()).decode(data, APPEND_COMMAND)
    return AppendCommand(
        v["requestId"], v["clientId"], v["sessionId"], tuple(v["events"]), v.get("expectedSeq")
    )


# --- replies -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendReply:
    """One ``dsh.session.replies`` value: the committed events, or the rejection."""

    request_id: str
    client_id: str
    session_id: str
    events: tuple[EventRecord, ...] | None = None
    error: dict[str, Any] | None = None  # SessionError.to_wire() form

    @classmethod
    def committed(
        cls,
        request_id: str,
        client_id: str,
        session_id: str,
        events: Iterable[EventRecord | EventLike],
    ) -> AppendReply:
        records = tuple(
            e if isinstance(e, EventRecord) else EventRecord(session_id, dict(_wire(e)))
            for e in events
        )
        return cls(request_id, client_id, session_id, events=records)

    @classmethod
    def rejected(
        cls, request_id: str, client_id: str, session_id: str, error: SessionError
    ) -> AppendReply:
        return cls(request_id, client_id, session_id, error=error.to_wire())

    def exception(self) -> SessionError | None:
        """The same dsh error class the writer raised, rebuilt; None when committed."""
        return None if self.error is None else error_from_wire(self.error)


def encode_reply(reply: AppendReply, *, codec: Codec | None = None) -> bytes:
    if (reply.events is None) == (reply.error is None):
        raise UnencodableError("reply: exactly one of events and error must be given")
    if reply.error is not None:
        e = reply.error
        result: dict[str, Any] = {
            "error": e.get("error"),
            "code": e.get("code"),
            "message": e.get("message"),
            "details": {k: x for k, x in e.items() if k not in ("error", "code", "message")},
        }
    else:
        result = {"events": _event_values(reply.events or (), reply.session_id)}
    return (codec or default_codec()).encode(
        APPEND_REPLY,
        {
            "requestId": reply.request_id,
            "clientId": reply.client_id,
            "sessionId": reply.session_id,
            "result": result,
        },
    )


def decode_reply(data: bytes, *, codec: Codec | None = None) -> AppendReply:
    _, v = (codec or default_codec()).decode(data, APPEND_REPLY)
    return _reply(v)


def decode_reply_frozen(data: bytes, *, codec: Codec | None = None) -> AppendReply:
    """:func:`decode_reply` whose events' objects and arrays are already the core's FrozenDict /
    FrozenList (as :func:`decode_event_frozen`): ``EventRecord.to_event`` then shares them
    instead of copying. For the client, which turns a read's replies into ``dsh.Event``s."""
    _, v = (codec or default_codec()).decode_frozen(data, APPEND_REPLY)
    return _reply(v)


def _reply(v: dict[str, Any]) -> AppendReply:
    result = v["result"]
    head = (v["requestId"], v["clientId"], v["sessionId"])
    if "events" in result:
        return AppendReply(*head, events=_event_records(result["events"]))
    error = {
        "error": result["error"],
        "code": result["code"],
        "message": result["message"],
        **result.get("details", {}),
    }
    return AppendReply(*head, error=error)


# --- snapshots ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AnsweredRequest:
    request_id: str
    client_id: str
    first_seq: int
    count: int


@dataclass(frozen=True)
class WriterSnapshot:
    """One ``dsh.session.snapshots`` value: the session's events up to ``last_seq``."""

    session_id: str
    events: tuple[dict[str, Any], ...]  # wire JSON, seq 0..last_seq
    requests: tuple[AnsweredRequest, ...] = ()
    state: Any = None  # open JSON for the writer; None when absent
    format_version: int = SESSION_FORMAT_VERSION
    last_seq: int = field(default=-1)

    def __post_init__(self) -> None:
        if self.last_seq == -1 and self.events:
            object.__setattr__(self, "last_seq", int(self.events[-1]["seq"]))


def encode_snapshot(snapshot: WriterSnapshot, *, codec: Codec | None = None) -> bytes:
    v: dict[str, Any] = {
        "sessionId": snapshot.session_id,
        "formatVersion": snapshot.format_version,
        "lastSeq": snapshot.last_seq,
        "events": _event_values(snapshot.events, snapshot.session_id),
        "requests": [
            {
                "requestId": r.request_id,
                "clientId": r.client_id,
                "firstSeq": r.first_seq,
                "count": r.count,
            }
            for r in snapshot.requests
        ],
    }
    if snapshot.state is not None:
        v["state"] = snapshot.state
    return (codec or default_codec()).encode(WRITER_SNAPSHOT, v)


def decode_snapshot(data: bytes, *, codec: Codec | None = None) -> WriterSnapshot:
    _, v = (codec or default_codec()).decode(data, WRITER_SNAPSHOT)
    return WriterSnapshot(
        session_id=v["sessionId"],
        events=tuple(r.event for r in _event_records(v["events"])),
        requests=tuple(
            AnsweredRequest(r["requestId"], r["clientId"], r["firstSeq"], r["count"])
            for r in v["requests"]
        ),
        state=v.get("state"),
        format_version=v["formatVersion"],
        last_seq=v["lastSeq"],
    )


# The fields a snapshot starts with, which snapshot_head reads without the events after them.
_SNAPSHOT_HEAD = (("sessionId", "string"), ("formatVersion", "int"), ("lastSeq", "long"))


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro int or long (zigzag varint) at ``pos``: (value, position after it)."""
    shift = n = 0
    while True:
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("writer-snapshot: a varint longer than 10 bytes")


def snapshot_head(data: bytes, *, codec: Codec | None = None) -> tuple[str, int]:
    """A snapshot's session id and last seq, read from its first fields: a restore learns
    them of every session it does not keep in memory without decoding their events. A
    snapshot written with a schema that starts otherwise is decoded whole."""
    codec = codec or _default()
    writer = codec.writer_of(data)
    if writer.name != WRITER_SNAPSHOT:
        raise SchemaMismatchError(f"expected a {WRITER_SNAPSHOT} record, got {writer.name}")
    fields = tuple((f["name"], f["type"]) for f in writer.schema["fields"][:3])
    if fields != _SNAPSHOT_HEAD:
        snapshot = decode_snapshot(data, codec=codec)
        return snapshot.session_id, snapshot.last_seq
    try:
        length, pos = _varint(data, HEADER_SIZE)
        if not 0 <= length <= len(data) - pos:
            raise IndexError
        session_id = data[pos : pos + length].decode()
        _, pos = _varint(data, pos + length)
        last_seq, _ = _varint(data, pos)
    except (IndexError, UnicodeDecodeError):
        raise CorruptRecordError(f"{WRITER_SNAPSHOT}: truncated or undecodable head") from None
    return session_id, last_seq


# --- Kafka record headers ----------------------------------------------------------------

_KIND_TYPES = {
    APPEND_COMMAND: "append-command",
    APPEND_REPLY: "append-reply",
    WRITER_SNAPSHOT: "writer-snapshot",
}


def event_headers(
    event_type: str, format_version: int = SESSION_FORMAT_VERSION
) -> list[tuple[str, bytes]]:
    """Headers of an events-topic record: ``dsh-type`` is the event type (consumers can filter
    without decoding), ``dsh-format`` the session format version."""
    return [
        (HEADER_TYPE, event_type.encode("utf-8")),
        (HEADER_FORMAT, str(format_version).encode("ascii")),
    ]


def record_headers(record: str) -> list[tuple[str, bytes]]:
    """Headers of a command, reply or snapshot record (``record`` is its Avro full name)."""
    return [
        (HEADER_TYPE, _KIND_TYPES[record].encode("ascii")),
        (HEADER_FORMAT, str(SESSION_FORMAT_VERSION).encode("ascii")),
    ]


@dataclass(frozen=True)
class RecordHeaders:
    type: str | None
    format: int | None


def read_headers(headers: Iterable[tuple[str, bytes | str | None]] | None) -> RecordHeaders:
    """``dsh-type`` and ``dsh-format`` from Kafka headers (missing or malformed ones: None)."""
    found: dict[str, str] = {}
    for k, v in headers or ():
        if k in (HEADER_TYPE, HEADER_FORMAT) and v is not None:
            try:
                found[k] = v.decode("utf-8") if isinstance(v, bytes) else v
            except UnicodeDecodeError:
                continue
    fmt = found.get(HEADER_FORMAT)
    return RecordHeaders(found.get(HEADER_TYPE), int(fmt) if fmt and fmt.isdigit() else None)


def header(
    headers: Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None,
    name: str,
) -> str | None:
    """One header's value as text (the first of that name), or None."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for key, value in pairs:
        if key == name and value is not None:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def invariants_of(
    headers: Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None,
) -> bool | None:
    """The ``dsh-invariants`` header's mode, None when there is none; ``ValueError`` for a
    value other than "on" or "off"."""
    value = header(headers, HEADER_INVARIANTS)
    if value is None:
        return None
    try:
        return INVARIANTS_VALUES[value]
    except KeyError:
        raise ValueError(
            f"header {HEADER_INVARIANTS} must be 'on' or 'off', not {value!r}"
        ) from None


def created_bare(
    headers: Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None,
) -> bool:
    """Whether a session's first event says the session was created with invariants off."""
    return header(headers, HEADER_INVARIANTS) == "off"
