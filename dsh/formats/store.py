"""An embedded session store: one JSONL file per session, so the core runs without Kafka.

Appends are write-behind: the store listens to each session it handed out and buffers the
committed events; :meth:`FileStore.flush` is the durability barrier (write, then fsync; a new
file is written whole under a temporary name, renamed into place, and its directory fsynced).
A crash loses exactly the events appended since the last completed flush.

One process owns a directory at a time (the single writer of the design); nothing here locks
against a second one.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from dsh.errors import FormatError, SessionError, register_error
from dsh.event import Event
from dsh.formats.header import SESSION_FORMAT_VERSION, SessionHeader
from dsh.formats.jsonl import encode_session, read_jsonl, replace_atomically
from dsh.formats.wire import DEFAULT_LIMITS, Limits, decode_line, encode_line
from dsh.projections import Interpreter
from dsh.session import Session

SUFFIX = ".jsonl"
# Portable file names only: no separators, no dot files, nothing a shell or another file
# system would read differently. (Ids differing only in case still collide on
# case-insensitive file systems.)
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class StoreError(SessionError):
    """``code``: ``UNSAFE_SESSION_ID``, ``SESSION_EXISTS``, ``SESSION_NOT_FOUND`` or
    ``SESSION_NOT_OPEN``."""

    default_code = "STORE"


register_error(StoreError)


def check_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not _SAFE_ID.fullmatch(session_id):
        raise StoreError(
            f"session id {session_id!r} is not a safe file name "
            "(1-128 of A-Z a-z 0-9 _ . -, starting with a letter or digit)",
            code="UNSAFE_SESSION_ID",
        )
    return session_id


class _Journal:
    """The file of one open session and the committed events not yet written to it."""

    def __init__(self, path: Path, session: Session, header: SessionHeader, *, exists: bool):
        self.path = path
        self.session = session
        self.header = header
        self.exists = exists
        # Set when the file on disk is an older format: the next flush rewrites it as v3
        # rather than appending v3 lines to it.
        self.rewrite = False
        self.pending: list[Event] = []
        self.lock = threading.RLock()
        self.unsubscribe = session.subscribe(self.on_event)

    def on_event(self, event: Event) -> None:
        # Listener failures are contained by the session, so do nothing here that can fail:
        # encoding happens in flush, where an error reaches the caller.
        with self.lock:
            self.pending.append(event)

    def flush(self) -> None:
        with self.lock:
            if self.rewrite or not self.exists:
                events = self.session.events() if self.rewrite else self.pending
                replace_atomically(self.path, encode_session(self.header, events))
                self.exists, self.rewrite = True, False
            elif self.pending:
                self._append(b"".join(encode_line(e.to_json()) for e in self.pending))
            self.pending.clear()

    def _append(self, body: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                # Leave no torn line behind, so a retried flush appends to a clean file.
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)


class FileStore:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        projections: Mapping[str, Interpreter] | None = None,
        invariants: bool = True,
        clock: Callable[[], int] | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._projections = dict(projections or {})
        self._invariants = invariants
        self._clock = clock
        self._limits = limits
        self._open: dict[str, _Journal] = {}

    def path(self, session_id: str) -> Path:
        return self.directory / (check_session_id(session_id) + SUFFIX)

    def ids(self) -> list[str]:
        """Sessions on disk or created and not yet flushed."""
        on_disk = {p.name.removesuffix(SUFFIX) for p in self.directory.glob("*" + SUFFIX)}
        return sorted({i for i in on_disk if _SAFE_ID.fullmatch(i)} | self._open.keys())

    def __contains__(self, session_id: object) -> bool:
        return isinstance(session_id, str) and session_id in self.ids()

    def create(self, session_id: str) -> Session:
        path = self.path(session_id)
        if session_id in self._open or path.exists():
            raise StoreError(f"session {session_id!r} already exists", code="SESSION_EXISTS")
        session = Session.create(session_id, clock=self._clock, invariants=self._invariants)
        for event_type, interpreter in self._projections.items():
            session.register_message_projection(event_type, interpreter)
        created = session.event(0).time if len(session) else self._now()
        # Recorded only when off: DSH's own files never carry the key.
        header = SessionHeader(session_id, created, invariants=None if self._invariants else False)
        self._open[session_id] = _Journal(path, session, header, exists=False)
        return session

    def open(self, session_id: str) -> Session:
        """The session, restored from its file; the same object while it stays open here."""
        if session_id in self._open:
            return self._open[session_id].session
        path = self.path(session_id)
        if not path.exists():
            raise StoreError(f"session {session_id!r} does not exist", code="SESSION_NOT_FOUND")
        _repair_tail(path, self._limits)
        header, events = read_jsonl(path, self._limits)
        if header.id != session_id:
            raise FormatError(
                f"{path.name}: header id {header.id!r} does not match the file name",
                code="BAD_HEADER",
            )
        session = Session.from_restore(
            session_id,
            events,
            projections=self._projections,
            # The mode the file records, else the store's.
            invariants=self._invariants if header.invariants is None else header.invariants,
            clock=self._clock,
        )
        journal = _Journal(path, session, header, exists=True)
        journal.rewrite = header.source_version != SESSION_FORMAT_VERSION
        # Restore may add a session/end-seed marker; it is part of the log now, so persist it.
        journal.pending.extend(session.events(len(events)))
        self._open[session_id] = journal
        return session

    def flush(self, session_id: str | None = None) -> None:
        """Durability barrier: every event committed so far is on disk when this returns."""
        for _, journal in self._journals(session_id):
            journal.flush()

    def close(self, session_id: str | None = None) -> None:
        """Flush and stop following the session(s); later appends to them are not kept."""
        for sid, journal in self._journals(session_id):
            journal.flush()
            journal.unsubscribe()
            del self._open[sid]

    def __enter__(self) -> FileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _journals(self, session_id: str | None) -> list[tuple[str, _Journal]]:
        if session_id is None:
            return list(self._open.items())
        if session_id not in self._open:
            raise StoreError(f"session {session_id!r} is not open", code="SESSION_NOT_OPEN")
        return [(session_id, self._open[session_id])]

    def _now(self) -> int:
        return self._clock() if self._clock is not None else time.time_ns() // 1_000_000


def _repair_tail(path: Path, limits: Limits) -> None:
    """Make the file end at a line boundary before anything is appended to it.

    The store ends every line with a newline, so an unterminated last line is what a crash
    during an append left behind. If it is not a whole JSON value it is torn: cut it off (its
    flush never returned, so nobody was promised it). If it is whole — a crash between the
    last byte and the newline, or a hand-made file — keep it and add the newline.
    """
    with open(path, "r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        # A line longer than the limit fails the read anyway, so looking that far back suffices.
        start = max(0, size - limits.max_line_bytes - 2)
        fh.seek(start)
        tail = fh.read()
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n") + 1  # 0 when the tail holds no newline: the whole window
        try:
            decode_line(tail[cut:], 0)
        except FormatError:
            fh.truncate(start + cut)
        else:
            fh.write(b"\n")
        fh.flush()
        os.fsync(fh.fileno())
