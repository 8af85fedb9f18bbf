"""The first line of a session file: ``{"type":"session","version":N,"id":…,"createdAt":…}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsh.errors import FormatError
from dsh.event import SESSION_FORMAT_VERSION
from dsh.formats.wire import is_int

__all__ = ["BAD_HEADER", "SESSION_FORMAT_VERSION", "SessionHeader", "parse_header"]
BAD_HEADER = "BAD_HEADER"

_KEYS = frozenset({"type", "version", "id", "createdAt"})


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """``version`` is what the events now are (always 3 once read); ``source_version`` is what
    the file held, so an importer can tell a migrated log from a native one."""

    id: str
    created_at: int
    version: int = SESSION_FORMAT_VERSION
    source_version: int = SESSION_FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "session",
            "version": self.version,
            "id": self.id,
            "createdAt": self.created_at,
        }


def parse_header(value: Any, line: int = 1) -> SessionHeader:
    """Validate the shape only; whether the version can be read is the migrations' call."""

    def bad(why: str) -> FormatError:
        return FormatError(f"line {line}: session header {why}", code=BAD_HEADER)

    if not isinstance(value, dict):
        raise bad("must be a JSON object")
    if value.get("type") != "session":
        raise bad('must have "type": "session"')
    # Unknown keys would be dropped on rewrite; a newer writer must bump the version instead.
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise bad(f"has unknown keys {unknown}")
    version, session_id, created_at = value.get("version"), value.get("id"), value.get("createdAt")
    if not is_int(version) or version < 0:
        raise bad(f"version must be a non-negative int, got {version!r}")
    if not isinstance(session_id, str) or not session_id:
        raise bad(f"id must be a non-empty string, got {session_id!r}")
    if not is_int(created_at) or created_at < 0:
        raise bad(f"createdAt must be epoch milliseconds (a non-negative int), got {created_at!r}")
    return SessionHeader(session_id, created_at, version, version)
