"""One flat row per event, for the analytics formats (``--format parquet`` and ``avro-flat``).

The wire schema's ``data`` is a recursive ``JsonValue`` that DuckDB, Polars, pyarrow and Spark
cannot read. A row instead holds the envelope as typed columns, ``data`` as compact JSON text,
the fields analysts ask first pulled out of ``data`` per the CONTRACT vocabulary, and where the
record lies (partition, offset) and whether a fork copied it from its parent (``inherited``).

Column names are snake_case: engines fold or compare unquoted identifiers case-insensitively,
and a Hive/Glue metastore stores them lower-cased, so ``sessionId`` would come back as
``sessionid`` there; snake_case reads the same in every engine and needs no quotes in SQL.

Extraction never fails: a field missing or of another type than the vocabulary's is null (the
writer validated every event, but ignorable unknown events and plugin types carry anything).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from dsh.vocabulary import LOG_TYPES, SURFACE_TYPES
from schemas import EventRecord

Kind = Literal["string", "int", "long", "bool", "timestamp", "longs"]


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    nullable: bool
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("session_id", "string", False, "the session"),
    Column("seq", "long", False, "the event's index in its session's log"),
    Column("time", "timestamp", False, "when the writer committed it (UTC, ms)"),
    Column("type", "string", False, "family/name"),
    Column("format_version", "int", False, "session format version of the event"),
    Column("surface_op", "string", True, "append or replace; null off the surface"),
    Column("replace_start_seq", "long", True, "a replace's first replaced node"),
    Column("replace_end_seq", "long", True, "a replace's last replaced node"),
    Column("source_event_seqs", "longs", True, "the events it cites"),
    Column("ignorable", "bool", False, "an unknown type kept as data"),
    Column("data", "string", False, "the event's data as compact JSON"),
    Column("turn", "long", True, "data.turn"),
    Column("step", "long", True, "data.step"),
    Column("role", "string", True, "the message's role"),
    Column("provider", "string", True, "the model's provider"),
    Column("model", "string", True, "the model"),
    Column("usage_input_tokens", "long", True, "data.usage.inputTokens"),
    Column("usage_output_tokens", "long", True, "data.usage.outputTokens"),
    Column("tool_name", "string", True, "tool/call's name"),
    Column("tool_call_id", "string", True, "tool/call's callId, tool/result's source.callId"),
    Column("error_code", "string", True, "a failed assistant/attempt's or tool/result's code"),
    Column("end_reason", "string", True, "turn/end's reason.kind"),
    Column("inherited", "bool", False, "a fork's copy of its parent's event (dsh-inherited)"),
    Column("partition", "int", False, "the record's partition of the events topic"),
    Column("offset", "long", False, "the record's offset there"),
)
NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

Row = tuple[Any, ...]  # values in COLUMNS order

# Types whose data carries its turn (and step): the vocabulary's surface and log types but for
# the user's message, the request's and the seed marker (CONTRACT §2); plugin types carry anything.
_NUMBERED = (SURFACE_TYPES | LOG_TYPES) - {
    "user/message",
    "request/header",
    "request/context",
    "session/end-seed",
}
_WRAPPED = frozenset({"system/message", "assistant/message", "tool/result"})  # data.message
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _long(value: Any) -> int | None:
    # bool is an int in Python; a number past 64 bits fits no column type (lossless JSON has them).
    if type(value) is int and _LONG_MIN <= value <= _LONG_MAX:
        return value
    return None


def _str(value: Any) -> str | None:
    return value if type(value) is str else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def data_json(data: Any) -> str:
    """Compact JSON, as the wire has it. orjson refuses integers past 64 bits: json takes them."""
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _surface(event: Mapping[str, Any]) -> tuple[str | None, int | None, int | None]:
    op = event.get("surfaceOp")
    if op == "append":
        return "append", None, None
    if isinstance(op, Mapping) and op.get("op") == "replace":
        return "replace", _long(op.get("startSeq")), _long(op.get("endSeq"))
    return None, None, None


def _seqs(value: Any) -> list[int] | None:
    if not isinstance(value, list):
        return None
    seqs = [_long(s) for s in value]
    return None if None in seqs else seqs  # type: ignore[return-value]


_UNTYPED: tuple[None, ...] = (None,) * 11


def _typed(type_: str, data: Any) -> tuple[Any, ...]:
    """turn .. end_reason, in COLUMNS order, from a known event's data."""
    d = _map(data)
    message = _map(d.get("message")) if type_ in _WRAPPED else d if type_ == "user/message" else {}
    source = _map(message.get("source"))
    usage = _map(d.get("usage")) if type_.startswith("assistant/") else {}
    provider = model = tool_name = call_id = error_code = end_reason = None
    if source.get("kind") == "model":
        provider, model = _str(source.get("provider")), _str(source.get("model"))
    elif source.get("kind") == "tool":
        call_id = _str(source.get("callId"))
    if type_ == "request/context":
        provider, model = _str(d.get("provider")), _str(d.get("model"))
    elif type_ == "tool/call":
        tool_name, call_id = _str(d.get("name")), _str(d.get("callId"))
    elif type_ == "turn/end":
        end_reason = _str(_map(d.get("reason")).get("kind"))
    if type_ in ("assistant/attempt", "tool/result"):
        error_code = _str(_map(d.get("error")).get("code"))
    numbered = type_ in _NUMBERED
    return (
        _long(d.get("turn")) if numbered else None,
        _long(d.get("step")) if numbered else None,
        _str(message.get("role")),
        provider,
        model,
        _long(usage.get("inputTokens")),
        _long(usage.get("outputTokens")),
        tool_name,
        call_id,
        error_code,
        end_reason,
    )


def row_of(record: EventRecord, partition: int, offset: int, inherited: bool) -> Row:
    event = record.event
    type_ = event["type"]
    data = event.get("data")
    surface: tuple[str | None, int | None, int | None]
    if event.get("ignorable") is True:
        # An unknown type: its data follows no vocabulary, and the op and sources it carries
        # are opaque data the log never applied.
        ignorable, surface, sources, typed = True, (None, None, None), None, _UNTYPED
    else:
        ignorable, surface = False, _surface(event)
        sources, typed = _seqs(event.get("sourceEventSeqs")), _typed(type_, data)
    return (
        record.session_id,
        event["seq"],
        event["time"],
        type_,
        record.format_version,
        *surface,
        sources,
        ignorable,
        data_json(data),
        *typed,
        inherited,
        partition,
        offset,
    )
