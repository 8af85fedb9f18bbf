"""Hot-path encodings the codec API has no call for: a committed reply and a session snapshot
assembled from the event records already encoded for the events topic, instead of encoding
every event again.

Avro makes this exact: a record nested in an array is written as its plain body, which is the
single-object value minus its 10-byte header, and the reply schema nests the same
SessionEvent record the events topic carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import dsh
from schemas import APPEND_REPLY, WRITER_SNAPSHOT, default_store
from schemas.avro_io import long_bytes as _long
from schemas.codec import HEADER_SIZE
from schemas.records import default_codec


@cache
def _reply_header() -> bytes:
    return default_store().current(APPEND_REPLY).header


@cache
def _snapshot_header() -> bytes:
    return default_store().current(WRITER_SNAPSHOT).header


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _long(len(b)) + b


def committed_reply(
    request_id: str, client_id: str, session_id: str, event_values: Sequence[bytes]
) -> bytes:
    """``AppendReply`` with ``AppendCommitted`` (union branch 0) of the given event values
    (none: a read of an unknown session)."""
    # An Avro array is blocks of (count, items) ended by a count of 0; empty, only that 0.
    events = (_long(len(event_values)), *(v[HEADER_SIZE:] for v in event_values), b"\x00")
    return b"".join(
        (
            _reply_header(),
            _string(request_id),
            _string(client_id),
            _string(session_id),
            b"\x00",
            *(events if event_values else (b"\x00",)),
        )
    )


def answered_request(request_id: str, client_id: str, first_seq: int, count: int) -> bytes:
    """One ``AnsweredRequest`` item of a snapshot's ``requests`` array."""
    return b"".join((_string(request_id), _string(client_id), _long(first_seq), _long(count)))


# A snapshot's writer state for a session created with invariants off.
BARE_STATE = {"invariants": False}


@cache
def _bare_state() -> bytes:
    """The snapshot's ``state`` field holding :data:`BARE_STATE`. Cut by the codec from an
    empty snapshot that has it (the field is last), so nothing of the JsonValue encoding is
    written by hand here."""
    empty = {"sessionId": "", "formatVersion": 0, "lastSeq": -1, "events": [], "requests": []}
    value = default_codec().encode(WRITER_SNAPSHOT, {**empty, "state": BARE_STATE})
    # The five fields before it are one byte each when empty: "", 0, -1, [], [].
    return value[HEADER_SIZE + 5 :]


def snapshot_value(
    session_id: str,
    format_version: int,
    event_values: Sequence[bytes],
    requests: bytes,
    request_count: int,
    *,
    bare: bool = False,
) -> bytes:
    """``WriterSnapshot`` of a session from its events' topic values (in seq order, each with
    its 10-byte header) and its answered requests (``request_count`` items of
    :func:`answered_request`, concatenated); ``bare``: the session was created with invariants
    off (the state says so), else no writer state."""
    parts: list[bytes | memoryview] = [
        _snapshot_header(),
        _string(session_id),
        _long(format_version),
        _long(len(event_values) - 1),
    ]
    if event_values:
        parts.append(_long(len(event_values)))
        parts.extend(memoryview(v)[HEADER_SIZE:] for v in event_values)
    parts.append(b"\x00")
    if request_count:
        parts += (_long(request_count), requests)
    parts.append(b"\x00")  # end of requests
    parts.append(_bare_state() if bare else b"\x00")  # state: null is union branch 0
    return b"".join(parts)


def event_wire(draft: dict[str, Any], event: dsh.Event) -> dict[str, Any]:
    """The committed event's wire JSON from its draft: the core stores the draft's data as is
    and only adds seq and time, so this equals ``event.to_json()`` without thawing the frozen
    copy again. A draft may say ``ignorable: false`` (the command schema allows it, and the
    core takes it as absent), but an event is ignorable only as true or absent: logged as
    false, it would not restore (``Event.from_json``: INVALID_IGNORABLE)."""
    wire = {**draft, "seq": event.seq, "time": event.time}
    if wire.get("ignorable") is False:
        del wire["ignorable"]
    return wire
