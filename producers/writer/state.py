"""What a writer holds for one partition, and how one command changes it. No Kafka here: the
writer decides what to publish from the :class:`Outcome` and only keeps the change once the
transaction that publishes it has committed (else it drops the partition and restores)."""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import dsh
from dsh.errors import SessionError, ValidationError
from dsh.event import SESSION_FORMAT_VERSION
from dsh.projections import Interpreter
from dsh.restore import restore
from producers.errors import (
    ConflictError,
    InvariantsModeError,
    MalformedCommandError,
    PayloadTooLargeError,
)
from producers.writer.rejections import Rejections
from producers.writer.residency import Evicted, Residency
from producers.writer.wire import answered_request, snapshot_value
from schemas import AppendCommand, default_store, encode_event
from schemas.codec import HEADER_SIZE
from schemas.store import SESSION_EVENT

log = logging.getLogger("dsh.writer")

_E = TypeVar("_E", bound=BaseException)


@functools.cache
def _current_event_header() -> bytes:
    return default_store().current(SESSION_EVENT).header


def reusable_value(value: bytes | None) -> bytes | None:
    """A value read from the events topic, if written with the current event schema: only then
    can its bytes go into a snapshot or reply as they are."""
    return value if value is not None and value[:HEADER_SIZE] == _current_event_header() else None


def without_traceback(error: _E) -> _E:
    """``error`` with its traceback dropped, and those of the errors it was raised from.

    A rejection outlives the call that raised it (in the reply, the rejection memory, a
    broken session). Its traceback holds the frames it passed through, and they hold their
    locals up to the writer's loop: the partition's state and the outcome that holds the
    error again. That cycle is freed only by the cycle collector; once
    ``DSH_WRITER_GC_FREEZE`` has frozen it, only by the next recovery's sweep, and it keeps
    a dropped partition's whole state alive until then."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        e = pending.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        pending += (e.__cause__, e.__context__)
    return error


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def new_session(
    session_id: str, interpreters: Mapping[str, Interpreter], invariants: bool = True
) -> dsh.Session:
    """A new session of this writer. Its message-projection interpreters are the writer's
    (``DSH_WRITER_PROJECTIONS``): the core refuses a projection event it has none for."""
    session = dsh.Session(session_id, clock=wall_clock_ms, invariants=invariants)
    for event_type, interpreter in interpreters.items():
        session.register_message_projection(event_type, interpreter)
    return session


@dataclass
class SessionState:
    session: dsh.Session
    # request id -> (first seq, count): a retried request is answered from the log.
    requests: dict[str, tuple[int, int]] = field(default_factory=dict)
    clients: dict[str, str] = field(default_factory=dict)  # request id -> client id
    events_since_snapshot: int = 0
    # The events-topic value of each event, by seq (None where not known, e.g. restored from a
    # snapshot): snapshots and answers to retries are assembled from these bytes instead of
    # encoding the session again, which kept snapshots O(session) in Python work.
    values: list[bytes | None] = field(default_factory=list)
    # The snapshot's ``requests`` array items for the first ``encoded_requests`` requests.
    requests_blob: bytearray = field(default_factory=bytearray)
    encoded_requests: int = 0
    prefix: bytes | None = None  # schemas.frames.event_prefix of the session, once needed
    # A snapshot holds every event and answered request, so it only grows: once over the
    # limit, it stays over it, and building it again (the whole session's bytes, every
    # snapshot_every events) would only be thrown away.
    oversized: bool = False
    # Where the topics hold this session, should it be evicted (producers.writer.residency):
    # a snapshots offset at or before its latest snapshot (None: none written), that
    # snapshot's last seq, and an events offset at or before its first event after it.
    snapshot_from: int | None = None
    snapshot_last: int = -1
    events_from: int = 0

    def stub(self, size: int) -> Evicted:
        """What is left of the session once evicted; ``size``: its logged bytes."""
        return Evicted(
            len(self.session),
            self.session.invariants,
            self.snapshot_from,
            self.snapshot_last,
            self.events_from,
            size,
            self.oversized,
        )

    def event_values(self, start: int, stop: int) -> list[bytes]:
        """Topic values of events ``start`` ..< ``stop``, encoding (and keeping) any not known."""
        values = self.values
        if len(values) < stop:
            values.extend([None] * (stop - len(values)))
        out: list[bytes] = []
        for seq in range(start, stop):
            v = values[seq]
            if v is None:
                v = values[seq] = encode_event(self.session.event(seq), self.session.id)
            out.append(v)
        return out

    def snapshot(self) -> bytes:
        """The ``WriterSnapshot`` value of the session as it is now."""
        if self.encoded_requests > len(self.requests):  # a request was taken back (undo)
            self.requests_blob.clear()
            self.encoded_requests = 0
        if self.encoded_requests < len(self.requests):
            clients = self.clients
            for rid, (first, count) in itertools.islice(
                self.requests.items(), self.encoded_requests, None
            ):
                self.requests_blob += answered_request(rid, clients.get(rid, ""), first, count)
            self.encoded_requests = len(self.requests)
        return snapshot_value(
            self.session.id,
            SESSION_FORMAT_VERSION,
            self.event_values(0, len(self.session)),
            bytes(self.requests_blob),
            self.encoded_requests,
            bare=not self.session.invariants,
        )


@dataclass(frozen=True)
class Outcome:
    events: tuple[dsh.Event, ...] = ()
    error: SessionError | None = None
    new: bool = False  # False for a rejection or a retried request answered from the log
    repeated: bool = False  # a retried request answered with its remembered rejection
    size: int = 0  # bytes a new one counted against the partition's memory budget


@dataclass(frozen=True)
class Limits:
    max_event_bytes: int
    max_command_bytes: int


def rebuild(
    session_id: str,
    events: Iterable[dsh.Event | dict[str, Any]],
    interpreters: Mapping[str, Interpreter],
    invariants: bool = True,
) -> dsh.Session:
    """The session exactly as logged, in its invariants mode: no end-of-session marker,
    unlike ``from_restore``, because the writer continues the log rather than starting a new
    process on it."""
    session = dsh.Session(session_id, clock=wall_clock_ms, invariants=invariants)
    return restore(session, events, interpreters, mark_end=False)


@dataclass
class Checkpoint:
    """A checkpoint in progress (:mod:`.snapshots`): its events offset, the sessions still to
    snapshot for it, and those too large to snapshot, each with an events offset at or before
    its first event its latest snapshot lacks (a restore reads those sessions from there)."""

    offset: int
    uncovered: list[str]
    unsnapshotted: dict[str, int] = field(default_factory=dict)


@dataclass
class PartitionState:
    partition: int
    # The writer's message-projection interpreters, for the sessions it creates or rebuilds.
    interpreters: Mapping[str, Interpreter] = field(default_factory=dict)
    sessions: dict[str, SessionState] = field(default_factory=dict)
    # Sessions whose log does not restore: every command for them gets this error.
    broken: dict[str, SessionError] = field(default_factory=dict)
    # Of those, the ones found broken by reading them back from their stubs (evicted, their
    # stubs kept): a checkpoint may name them there (producers/writer/snapshots.py).
    broken_on_reload: set[str] = field(default_factory=set)
    # Evicted sessions a checkpoint could not read back (a KafkaException): named by their
    # stubs, and owed no further checkpoint (producers/writer/snapshots.py).
    unreadable: set[str] = field(default_factory=set)
    restored_from: int = 0  # events offset the restore read from (the last checkpoint)
    # Sessions with events no snapshot covers yet; a checkpoint snapshots all of them.
    dirty: set[str] = field(default_factory=set)
    events_since_checkpoint: int = 0
    checkpoint: Checkpoint | None = None  # one in progress
    # The restore evicted sessions with events no snapshot covers: until a checkpoint
    # snapshots them, every checkpoint names them and restores read the events topic from
    # their first event, however long they stay quiet. So one is written as soon as the
    # writer is idle, not only after ``checkpoint_every`` events (producers/writer/snapshots.py).
    checkpoint_owed: bool = False
    # The commands offset the partition's next transaction sends (None: not known, none
    # committed): a transaction with no command sends it again, so that the group still
    # fences it (KIP-447).
    commands_next: int | None = None

    # Requests rejected recently: a retry gets the same rejection (producers/writer/rejections.py).
    rejections: Rejections = field(default_factory=Rejections)
    # The sessions kept in memory, and where the evicted ones are (producers/writer/residency.py).
    residency: Residency = field(default_factory=Residency)
    # Offsets at or before any record produced from now on, in the snapshots and events
    # partitions (the ends last asked for): where an eviction says to look for its records.
    snapshots_mark: int = 0
    events_mark: int = 0

    def found_broken_on_reload(self, session_id: str, exc: SessionError) -> None:
        """Its log does not rebuild: refused from now on, as after a restore. A checkpoint may
        name it by its stub, which a restore reads to find it broken again."""
        self.broken[session_id] = without_traceback(exc)
        self.broken_on_reload.add(session_id)

    def held(self, session_id: str) -> SessionState | None:
        """The session's state, restored if it was evicted; None for a session never seen.
        An evicted session whose log does not rebuild raises its error, and is broken."""
        state = self.sessions.get(session_id)
        if state is None:
            try:
                state = self.residency.take_back(session_id)
            except SessionError as exc:
                self.found_broken_on_reload(session_id, exc)
                raise
            if state is None:
                return None
            self.sessions[session_id] = state
        else:
            self.residency.used(session_id)
        return state

    def events_from(self, session_id: str) -> int | None:
        """An events offset at or before the session's first event its latest snapshot lacks,
        resident or evicted; None for a session this partition does not have."""
        state = self.sessions.get(session_id)
        if state is not None:
            return state.events_from
        stub = self.residency.stub(session_id)
        return stub.events_from if stub is not None else None

    def session(self, session_id: str, invariants: bool | None = None) -> SessionState:
        """The session's state, made if need be. ``invariants``: the mode a command asks for
        (None: the default, on); a session with no event yet takes it (the mode is fixed by
        the first committed append), any other keeps its own."""
        state = self.held(session_id)
        mode = True if invariants is None else invariants
        if state is None:
            state = SessionState(new_session(session_id, self.interpreters, mode))
            state.events_from = self.events_mark
            self.sessions[session_id] = state
            self.residency.used(session_id)
        elif not len(state.session) and state.session.invariants != mode:
            # Only a rejected command made it: as a restore would, start it afresh.
            state.session = new_session(session_id, self.interpreters, mode)
        return state

    def apply(
        self, command: AppendCommand, size: int, limits: Limits, invariants: bool | None = None
    ) -> Outcome:
        """Apply ``command``; ``invariants``: the mode it asks its session to have (None:
        whatever the session has)."""
        outcome = self._apply(command, size, limits, invariants)
        if outcome.error is not None:
            self._forget_if_empty(command.session_id)
        return outcome

    def _forget_if_empty(self, session_id: str) -> None:
        """Drop a session that has no event: only rejected commands made it, and it would hold
        memory no byte budget counts (every id a client gets refused for would stay). Nothing
        is lost: a retry's rejection is remembered by (session, request) in ``rejections``,
        and the next command starts the session afresh, as a restore would. A session with
        events, even ones whose transaction has not committed yet, is kept."""
        state = self.sessions.get(session_id)
        if state is not None and not len(state.session):
            del self.sessions[session_id]
            self.residency.forget(session_id)
            self.dirty.discard(session_id)

    def _apply(
        self, command: AppendCommand, size: int, limits: Limits, invariants: bool | None
    ) -> Outcome:
        broken = self.broken.get(command.session_id)
        if broken is not None:
            return Outcome(error=broken)
        try:
            state = self.session(command.session_id, invariants)
        except SessionError as exc:
            return Outcome(error=without_traceback(exc))
        answered = state.requests.get(command.request_id)
        if answered is not None:
            first, count = answered
            return Outcome(events=state.session.events(first, first + count))
        try:
            _check_command(command, size, limits)
        except SessionError as exc:
            return Outcome(error=without_traceback(exc))
        session = state.session
        if invariants is not None and session.invariants != invariants:
            return Outcome(
                error=InvariantsModeError(
                    f"session {command.session_id!r} was created with invariants "
                    f"{_mode(session.invariants)}; request {command.request_id!r} asks for "
                    f"{_mode(invariants)}, and a session's mode is fixed when it is created"
                )
            )
        before = len(session)
        if command.expected_seq is not None and command.expected_seq != before:
            return Outcome(
                error=ConflictError(
                    f"session {command.session_id!r}: expected seq {command.expected_seq}, "
                    f"but the next seq is {before}"
                )
            )
        try:
            events = tuple(_append(session, d) for d in command.events)
        except Exception as exc:
            if len(session) > before:
                # All-or-nothing: the core appends one event at a time, so a command failing
                # part-way is undone by restoring the session from its events before it.
                state.session = rebuild(
                    command.session_id,
                    session.events(0, before),
                    self.interpreters,
                    session.invariants,
                )
            if not isinstance(exc, SessionError):
                # Not a rejection but a fault in the core: the client gets INTERNAL, the
                # operator the traceback.
                log.error(
                    "request %r to session %r: the core raised %s",
                    command.request_id,
                    command.session_id,
                    type(exc).__name__,
                    exc_info=exc,
                )
                exc = ValidationError(f"{type(exc).__name__}: {exc}", code="INTERNAL")
            return Outcome(error=without_traceback(exc))
        state.requests[command.request_id] = (before, len(events))
        state.clients[command.request_id] = command.client_id
        self.residency.grew(command.session_id, size)
        state.events_since_snapshot += len(events)
        self.dirty.add(command.session_id)
        self.events_since_checkpoint += len(events)
        return Outcome(events=events, new=True, size=size)

    def undo(self, command: AppendCommand, outcome: Outcome) -> None:
        """Take back an applied command the writer cannot publish (e.g. an event too large
        once encoded); rare, so it simply restores the session from the events before it."""
        state = self.sessions[command.session_id]
        first = outcome.events[0].seq
        state.session = rebuild(
            command.session_id,
            state.session.events(0, first),
            self.interpreters,
            state.session.invariants,
        )
        del state.values[first:]
        del state.requests[command.request_id]
        state.clients.pop(command.request_id, None)
        state.events_since_snapshot = max(0, state.events_since_snapshot - len(outcome.events))
        self.events_since_checkpoint = max(0, self.events_since_checkpoint - len(outcome.events))
        self.residency.shrank(command.session_id, outcome.size)
        self._forget_if_empty(command.session_id)  # its first command: nothing left of it


def _mode(invariants: bool) -> str:
    return "on" if invariants else "off"


def _append(session: dsh.Session, draft: dict[str, Any]) -> dsh.Event:
    return session.append(
        draft["type"],
        draft["data"],
        surface_op=draft.get("surfaceOp"),
        source_event_seqs=draft.get("sourceEventSeqs"),
        ignorable=bool(draft.get("ignorable", False)),
    )


def _check_command(command: AppendCommand, size: int, limits: Limits) -> None:
    if not command.events:
        raise MalformedCommandError(f"request {command.request_id!r}: a command needs events")
    if size > limits.max_command_bytes:
        raise PayloadTooLargeError(
            f"request {command.request_id!r}: command is {size} bytes, the limit is "
            f"{limits.max_command_bytes}",
            code="COMMAND_TOO_LARGE",
        )


def requests_from_log(
    request_ids: Sequence[str | None], first_seq: int = 0
) -> dict[str, tuple[int, int]]:
    """Rebuild the request table from the ``dsh-request-id`` header of each event, in seq
    order from ``first_seq``: a command's events are consecutive and carry the same id."""
    table: dict[str, tuple[int, int]] = {}
    for seq, rid in enumerate(request_ids, first_seq):
        if rid is None:
            continue
        first, count = table.get(rid, (seq, 0))
        if first + count == seq:
            table[rid] = (first, count + 1)
    return table
