"""The first line of a session file: ``{"type":"session","version":N,"id":…,"createdAt":…}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsh.errors import FormatError
from dsh.event import SESSION_FORMAT_VERSION
from dsh.formats.wire import is_int

__all__ = ["BAD_HEADER", "SESSION_FORMAT_VERSION", "SessionHeader", "parse_header"]
BAD_HEADER = "BAD_HEADER"

_KEYS = frozenset({"type", "version", "id", "createdAt", "invariants"})
# What DSH's own session package writes beside them: where the session ran, the session it
# was forked from, and whether it was seeded from one.
_LINEAGE = {"cwd": "cwd", "parentSession": "parent_session", "isSeeded": "is_seeded"}


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """``version`` is what the events now are (always 3 once read); ``source_version`` is what
    the file held, so an importer can tell a migrated log from a native one.

    ``cwd``, ``parent_session`` and ``is_seeded``: the lineage DSH records (None: not in the
    file). ``invariants``: the session's turn-invariants mode, which this implementation
    records (``"invariants": false`` for a bare session) and DSH does not (None: not said).
    ``extra``: keys a newer DSH wrote that this version does not know, kept as they were
    (key, JSON value) so that a rewrite of the file loses nothing."""

    id: str
    created_at: int
    version: int = SESSION_FORMAT_VERSION
    source_version: int = SESSION_FORMAT_VERSION
    cwd: str | None = None
    parent_session: str | None = None
    is_seeded: bool | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    invariants: bool | None = None

    def lineage(self) -> dict[str, Any]:
        """The lineage keys the file carried, under their wire names."""
        return {
            wire: getattr(self, name)
            for wire, name in _LINEAGE.items()
            if getattr(self, name) is not None
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "session",
            "version": self.version,
            "id": self.id,
            "createdAt": self.created_at,
            **self.lineage(),
            **({} if self.invariants is None else {"invariants": self.invariants}),
            **dict(self.extra),
        }


def parse_header(value: Any, line: int = 1) -> SessionHeader:
    """Validate the shape only; whether the version can be read is the migrations' call."""

    def bad(why: str) -> FormatError:
        return FormatError(f"line {line}: session header {why}", code=BAD_HEADER)

    if not isinstance(value, dict):
        raise bad("must be a JSON object")
    if value.get("type") != "session":
        raise bad('must have "type": "session"')
    version, session_id, created_at = value.get("version"), value.get("id"), value.get("createdAt")
    if not is_int(version) or version < 0:
        raise bad(f"version must be a non-negative int, got {version!r}")
    if not isinstance(session_id, str) or not session_id:
        raise bad(f"id must be a non-empty string, got {session_id!r}")
    if not is_int(created_at) or created_at < 0:
        raise bad(f"createdAt must be epoch milliseconds (a non-negative int), got {created_at!r}")
    cwd, parent, seeded = (value.get(k) for k in _LINEAGE)
    invariants = value.get("invariants")
    for key, got, kind in (
        ("cwd", cwd, str),
        ("parentSession", parent, str),
        ("isSeeded", seeded, bool),
        ("invariants", invariants, bool),
    ):
        if got is not None and type(got) is not kind:
            raise bad(f"{key} must be a {kind.__name__}, got {got!r}")
    extra = tuple((k, value[k]) for k in sorted(value) if k not in _KEYS and k not in _LINEAGE)
    return SessionHeader(
        session_id, created_at, version, version, cwd, parent, seeded, extra, invariants
    )
