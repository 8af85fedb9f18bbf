"""Kafka records of the events topic → (session id, wire event), or the reason they are poison."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dsh.errors import SessionError
from dsh.event import SESSION_FORMAT_VERSION, Event
from projectors.errors import PoisonRecordError
from schemas.records import decode_event_frozen, encode_event


class Record(NamedTuple):
    """A NamedTuple, not a frozen dataclass: one is built per consumed event."""

    session_id: str
    event: Event
    partition: int
    offset: int
    # The session's first event (seq 0) says it was created with invariants off. Set by the
    # readers that restore sessions (topic_reader); the projectors never need it.
    bare: bool = False

    @property
    def seq(self) -> int:
        return self.event.seq


@dataclass(frozen=True)
class Poison:
    session_id: str | None  # None when even the key is unusable
    error: SessionError
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes], ...] = ()  # the record's own (dsh-type, dsh-format, …)


def invariants_mode(items: Sequence[Record | Poison]) -> bool:
    """A session's invariants mode, as its first record says (``topic_reader`` reads it)."""
    first = items[0] if items else None
    return not (isinstance(first, Record) and first.bare)


def decode(
    key: bytes | None,
    value: bytes | None,
    partition: int,
    offset: int,
    headers: Any = None,  # as confluent-kafka gives them: a list of pairs, or None
) -> Record | Poison:
    session_id: str | None = None
    try:
        if not key:
            raise PoisonRecordError(f"offset {offset}: record has no key (the session id)")
        session_id = key.decode("utf-8")
        if value is None:
            raise PoisonRecordError(f"session {session_id} offset {offset}: record has no value")
        record = decode_event_frozen(value)
        if record.session_id != session_id:
            raise PoisonRecordError(
                f"session {session_id}: record value belongs to session {record.session_id!r}"
            )
        if record.format_version != SESSION_FORMAT_VERSION:
            raise PoisonRecordError(
                f"session {session_id} event {record.event.get('seq')}: formatVersion "
                f"{record.format_version} is not {SESSION_FORMAT_VERSION}"
            )
        return Record(session_id, Event.from_json(record.event), partition, offset)
    except UnicodeDecodeError:
        error: SessionError = PoisonRecordError(f"offset {offset}: key is not UTF-8")
    except SessionError as exc:
        error = exc
    kept = tuple(
        (k, v if isinstance(v, bytes) else str(v or "").encode()) for k, v in headers or ()
    )
    return Poison(session_id, error, key, value, partition, offset, kept)


def encode(session_id: str, wire: Mapping[str, Any]) -> bytes:
    """The record value the writer publishes for one event (used by tests and tools)."""
    return encode_event(wire, session_id)
