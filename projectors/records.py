"""Kafka records of the events topic → (session id, wire event), or the reason they are poison."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from dsh.errors import SessionError
from dsh.event import Event
from projectors.errors import PoisonRecordError
from schemas.codec import Codec
from schemas.store import SESSION_EVENT

FORMAT_VERSION = 3
_ENVELOPE_ONLY = ("sessionId", "formatVersion")


@dataclass(frozen=True)
class Record:
    session_id: str
    event: Event
    partition: int
    offset: int

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


@cache
def _codec() -> Codec:
    return Codec()


def decode(key: bytes | None, value: bytes | None, partition: int, offset: int) -> Record | Poison:
    session_id: str | None = None
    try:
        if not key:
            raise PoisonRecordError(f"offset {offset}: record has no key (the session id)")
        session_id = key.decode("utf-8")
        if value is None:
            raise PoisonRecordError(f"session {session_id} offset {offset}: record has no value")
        _, event = _codec().decode(value, expect=SESSION_EVENT)
        wire = check_envelope(session_id, event)
        return Record(session_id, Event.from_json(wire), partition, offset)
    except UnicodeDecodeError:
        error: SessionError = PoisonRecordError(f"offset {offset}: key is not UTF-8")
    except SessionError as exc:
        error = exc
    return Poison(session_id, error, key, value, partition, offset)


def check_envelope(session_id: str, event: Mapping[str, Any]) -> dict[str, Any]:
    if event.get("sessionId") != session_id:
        raise PoisonRecordError(
            f"session {session_id}: record value belongs to session {event.get('sessionId')!r}"
        )
    if event.get("formatVersion") != FORMAT_VERSION:
        raise PoisonRecordError(
            f"session {session_id} event {event.get('seq')}: formatVersion "
            f"{event.get('formatVersion')!r} is not {FORMAT_VERSION}"
        )
    return {k: v for k, v in event.items() if k not in _ENVELOPE_ONLY}


def encode(session_id: str, wire: Mapping[str, Any]) -> bytes:
    """The record value the writer publishes for one event (used by tests and tools)."""
    return _codec().encode(
        SESSION_EVENT, {"sessionId": session_id, "formatVersion": FORMAT_VERSION, **wire}
    )
