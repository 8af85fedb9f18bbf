"""``dsh.Session``: the validated append-only log and its projections.

Every event goes through one path: the session's :class:`~dsh.fold.SurfaceFold` plans it
against every surface rule, the session adds the turn invariants, and only then is it committed
(to the fold, the log, the transcript and the turn state). Append and restore share that path,
so they enforce the same rules, and a rejected event leaves no trace.
"""

from __future__ import annotations

import logging
import time as _time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from dsh.drafts import check_draft
from dsh.errors import ProjectionError, ReentrantAppendError, ValidationError
from dsh.event import Event, SurfaceOp, check_type
from dsh.fold import APPEND, LOG, PROJECTION, Step, SurfaceFold
from dsh.invariants import TurnState
from dsh.projections import Interpreter, check_registrable
from dsh.surface import Surface
from dsh.vocabulary import SURFACE_TYPES

log = logging.getLogger("dsh.session")

Clock = Callable[[], int]
Listener = Callable[[Event], object]


# Event times are epoch milliseconds in a signed 64-bit integer (the Avro long of the wire).
TIME_MIN, TIME_MAX = -(2**63), 2**63 - 1


def _wall_clock() -> int:
    return _time.time_ns() // 1_000_000


def _bad_time(ev: Event) -> ValidationError:
    return ValidationError(
        f"event {ev.seq} ({ev.type}): time {ev.time} is outside a signed 64-bit integer",
        code="TIME_OUT_OF_RANGE",
    )


def is_append_surface_event(ev: Event) -> bool:
    """True for the events a human transcript shows: surface events appended (not replacements)."""
    return ev.surface_op == "append" and ev.type in SURFACE_TYPES


class Session:
    __slots__ = (
        "_busy",
        "_clock",
        "_events",
        "_fold",
        "_invariants",
        "_last_time",
        "_listeners",
        "_missing",
        "_opaque_types",
        "_projections",
        "_transcript",
        "_turns",
        "_used_projections",
        "id",
    )

    def __init__(self, session_id: str, *, clock: Clock | None = None, invariants: bool = True):
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session id must be a non-empty string")
        self.id = session_id
        self._clock: Clock = clock or _wall_clock
        self._invariants = bool(invariants)
        self._events: list[Event] = []
        self._fold = SurfaceFold(log=self._events)
        self._turns = TurnState()
        self._projections: dict[str, Interpreter] = {}
        self._used_projections: set[str] = set()
        self._opaque_types: set[str] = set()
        self._missing: tuple[str, ...] = ()
        self._transcript: list[Event] = []
        self._listeners: list[Listener] = []
        self._busy = False
        self._last_time = 0

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(
        cls, session_id: str, clock: Clock | None = None, invariants: bool = True
    ) -> Session:
        return cls(session_id, clock=clock, invariants=invariants)

    @classmethod
    def from_restore(
        cls,
        session_id: str,
        events: Iterable[Event | Mapping[str, Any]],
        projections: Mapping[str, Interpreter] | None = None,
        invariants: bool = True,
        clock: Clock | None = None,
    ) -> Session:
        from dsh.restore import restore  # restore/fork/repair build on Session: imported late

        return restore(cls(session_id, clock=clock, invariants=invariants), events, projections)

    def fork(self, child_id: str, at: int | None = None) -> Session:
        from dsh.restore import fork

        self._check_health()
        return fork(self, child_id, at)

    def close_interrupted_turn(self) -> tuple[Event, ...]:
        from dsh.repair import close_interrupted_turn

        return close_interrupted_turn(self)

    # -- append -------------------------------------------------------------------------

    def append(
        self,
        type: str,
        data: object,
        surface_op: SurfaceOp | Mapping[str, Any] = None,
        source_event_seqs: Iterable[int] | None = None,
        ignorable: bool = False,
    ) -> Event:
        if self._busy:
            raise ReentrantAppendError(
                f"session {self.id!r}: append called from inside a listener or interpreter",
            )
        self._check_health()
        seq = len(self._events)
        type_, frozen, op, sources = check_draft(
            type, data, surface_op, source_event_seqs, ignorable, seq
        )
        now = self._clock()
        if now.__class__ is not int:
            now = int(now)
        last = self._last_time
        if now > last:
            if now > TIME_MAX:
                raise _bad_time(Event(type_, seq, now, frozen, op, sources, ignorable))
        else:
            now = last
        ev = Event(type_, seq, now, frozen, op, sources, ignorable)
        self._busy = True  # an interpreter must not append either
        try:
            step = self._fold.plan(ev, self._projections)
            if self._invariants and step.kind <= LOG:
                self._turns.check(ev)
        finally:
            self._busy = False
        self._commit(ev, step)
        if self._listeners:
            self._notify(ev)
        return ev

    def append_logged(self, events: Iterable[Event]) -> None:
        """Validate and commit events exactly as they were logged, in order: every rule of
        :meth:`append` applies, but each event keeps its seq (the first must be ``len(self)``)
        and its recorded time (within a signed 64-bit integer, but possibly earlier than the
        previous event's, as DSH's restore allows), and listeners are not told. Restore and
        fork build sessions with it. The events must be well-formed (``Event.from_json`` checks
        wire input). The first rejected event raises; it commits nothing, the events before it
        stay committed.
        """
        if self._busy:
            raise ReentrantAppendError(
                f"session {self.id!r}: append called from inside a listener or interpreter",
            )
        self._check_health()
        plan, projections, commit = self._fold.plan, self._projections, self._commit
        check = self._turns.check if self._invariants else None
        self._busy = True  # an interpreter must not append
        try:
            for ev in events:
                # A time the wire cannot carry would also be stamped on every later append.
                if not TIME_MIN <= ev.time <= TIME_MAX:
                    raise _bad_time(ev)
                step = plan(ev, projections)  # the surface rules, then the turn rules
                if check is not None and step.kind <= LOG:
                    check(ev)
                commit(ev, step)
        finally:
            self._busy = False

    def _commit(self, ev: Event, step: Step) -> None:
        self._events.append(ev)
        if ev.time > self._last_time:
            self._last_time = ev.time
        self._fold.commit(ev, step)
        kind = step.kind
        if kind == APPEND:
            self._transcript.append(ev)
        elif kind > LOG:
            # Only core types change turn state; these two kinds are remembered by type.
            if kind == PROJECTION:
                self._used_projections.add(ev.type)
            else:
                self._opaque_types.add(ev.type)
            return
        self._turns.apply(ev)

    def _notify(self, ev: Event) -> None:
        self._busy = True
        try:
            for listener in tuple(self._listeners):
                try:
                    listener(ev)
                except Exception:
                    # A listener is an observer; the event is already committed.
                    log.exception("session %r: listener failed on event %d", self.id, ev.seq)
        finally:
            self._busy = False

    # -- reads --------------------------------------------------------------------------

    def _check_health(self) -> None:
        if self._missing:
            raise ProjectionError(
                f"session {self.id!r} used message projection(s) "
                f"{', '.join(self._missing)} whose interpreter was removed; register it again",
                code="PROJECTION_INTERPRETER_MISSING",
            )

    def __len__(self) -> int:
        return len(self._events)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, events={len(self._events)}, surface={self._fold.surface!r})"

    @property
    def surface(self) -> Surface:
        self._check_health()
        return self._fold.surface

    @property
    def invariants(self) -> bool:
        return self._invariants

    @property
    def clock(self) -> Clock:
        """The clock appends are stamped with (a fork inherits it)."""
        return self._clock

    @property
    def last_time(self) -> int:
        """The latest time in the log (epoch ms; 0 when empty): no append is stamped earlier."""
        return self._last_time

    @property
    def projections(self) -> Mapping[str, Interpreter]:
        """The registered message-projection interpreters, by event type (a read-only view)."""
        return MappingProxyType(self._projections)

    @property
    def turns(self) -> TurnState:
        """The open turn, step and tool calls as the log leaves them; read-only by convention
        (crash repair and fork read it)."""
        return self._turns

    def event(self, seq: int) -> Event:
        self._check_health()
        if type(seq) is not int or not 0 <= seq < len(self._events):
            raise IndexError(f"session {self.id!r} has no event {seq!r}")
        return self._events[seq]

    def events(self, start: int = 0, stop: int | None = None) -> tuple[Event, ...]:
        self._check_health()
        return tuple(self._events[start:stop])

    def derive_messages(self) -> list[Mapping[str, Any]]:
        self._check_health()
        return self._fold.derive_messages()

    def transcript(self) -> tuple[Event, ...]:
        self._check_health()
        return tuple(self._transcript)

    # -- listeners and projections ------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def register_message_projection(
        self, event_type: str, interpreter: Interpreter
    ) -> Callable[[], None]:
        check_type(event_type, len(self._events))
        check_registrable(event_type)
        if event_type in self._opaque_types:
            # Its earlier events were logged as opaque; a restore with the interpreter would
            # interpret them and disagree with this session.
            raise ProjectionError(
                f'"{event_type}" already appears in session {self.id!r} as an ignorable unknown '
                "type; it cannot become a message projection here",
                code="PROJECTION_TYPE_ALREADY_LOGGED",
            )
        if not callable(interpreter):
            raise TypeError("interpreter must be callable")
        self._projections[event_type] = interpreter
        self._refresh_missing()

        def remove() -> None:
            if self._projections.get(event_type) is interpreter:
                del self._projections[event_type]
                self._refresh_missing()

        return remove

    def _refresh_missing(self) -> None:
        self._missing = tuple(sorted(self._used_projections - self._projections.keys()))
