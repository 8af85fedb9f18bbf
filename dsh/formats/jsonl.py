"""Reading and writing session files: a header line, then one event per line.

Reading migrates any older version to v3; writing only ever produces v3.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from dsh.errors import FormatError, ValidationError
from dsh.event import Event
from dsh.formats.header import BAD_HEADER, SESSION_FORMAT_VERSION, SessionHeader, parse_header
from dsh.formats.log import Entry, WireEvent
from dsh.formats.migrations import migrate_entries
from dsh.formats.wire import (
    DEFAULT_LIMITS,
    Limits,
    PathLike,
    Source,
    decode_line,
    encode_line,
    iter_source_lines,
)

NOT_JSON = "NOT_JSON"
INVALID_EVENT = "INVALID_EVENT"


Writable = Event | Mapping[str, Any]


def read_entries(
    source: Source, limits: Limits = DEFAULT_LIMITS
) -> tuple[SessionHeader, list[Entry]]:
    """The header and the v3 events of a session file of any supported version, with the
    line each came from. Blank lines are skipped (a trailing one is common) but counted."""
    header: SessionHeader | None = None
    entries: list[Entry] = []
    for number, raw in iter_source_lines(source, limits):
        if not raw.strip():
            continue
        value = decode_line(raw, number)
        if header is None:
            header = parse_header(value, number)
        else:
            entries.append(Entry(value, number))
    if header is None:
        raise FormatError("session file has no header line", code=BAD_HEADER)
    migrated = migrate_entries(header.version, entries)
    header = dataclasses.replace(
        header, version=SESSION_FORMAT_VERSION, source_version=header.version
    )
    return header, migrated


def read_wire(
    source: Source, limits: Limits = DEFAULT_LIMITS
) -> tuple[SessionHeader, list[WireEvent]]:
    """The header and the v3 wire dicts of a session file of any supported version."""
    header, entries = read_entries(source, limits)
    return header, [e.event for e in entries]


def read_jsonl(
    source: Source, limits: Limits = DEFAULT_LIMITS
) -> tuple[SessionHeader, tuple[Event, ...]]:
    """``dsh.formats.read_jsonl``: a session file of any supported version as v3 events.

    Only the envelope is checked here; whether the events form a valid session is what
    ``Session.from_restore`` decides.
    """
    header, entries = read_entries(source, limits)
    events = []
    for entry in entries:
        try:
            events.append(Event.from_json(entry.event))
        except ValidationError as exc:
            raise FormatError(
                f"{entry.where(SESSION_FORMAT_VERSION)}: {exc.message}", code=INVALID_EVENT
            ) from exc
    return header, tuple(events)


def _as_wire(event: Writable) -> Any:
    return event if isinstance(event, Mapping) else event.to_json()


def encode_session(header: SessionHeader, events: Iterable[Writable]) -> Iterator[bytes]:
    """The lines of a v3 session file, newline-terminated."""
    if header.version != SESSION_FORMAT_VERSION:
        raise FormatError(
            f"only version {SESSION_FORMAT_VERSION} is written, not {header.version}",
            code=BAD_HEADER,
        )
    yield encode_line(header.to_json())
    for index, event in enumerate(events):
        try:
            yield encode_line(_as_wire(event))
        except (TypeError, ValueError) as exc:
            raise FormatError(f"event {index} is not lossless JSON: {exc}", code=NOT_JSON) from exc


def write_jsonl(
    path: PathLike,
    header: SessionHeader | str,
    events: Iterable[Writable],
    *,
    created_at: int | None = None,
) -> SessionHeader:
    """Write a v3 session file atomically (see :func:`replace_atomically`).

    ``header`` may be just the session id; ``createdAt`` then defaults to the first event's
    time (0 for an empty log), keeping the output a pure function of the input.
    """
    events = list(events)
    if isinstance(header, str):
        if created_at is None:
            created_at = int(_as_wire(events[0]).get("time", 0)) if events else 0
        header = SessionHeader(header, created_at)
    replace_atomically(path, encode_session(header, events))
    return header


def replace_atomically(path: PathLike, chunks: Iterable[bytes]) -> None:
    """Write under a temporary name, fsync, rename over ``path``, fsync the directory: a reader
    (or a crash) sees the old file or the whole new one, never a mix."""
    target = Path(path)
    fd, tmp = _temporary_beside(target)
    try:
        with contextlib.suppress(FileNotFoundError):  # the file it replaces keeps its mode
            os.fchmod(fd, stat.S_IMODE(target.stat().st_mode))
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def _temporary_beside(target: Path) -> tuple[int, str]:
    """A new file next to ``target``, created as open() creates one (0666 less the umask,
    applied by the kernel: reading the umask would mean setting it for the whole process)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


def fsync_directory(directory: PathLike) -> None:
    """Make a created or renamed directory entry durable (POSIX; a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some platforms and file systems refuse fsync on directories
    finally:
        os.close(fd)
