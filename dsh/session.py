"""``dsh.Session``: the validated append-only log and its projections.

Every event goes through one path: ``_plan`` checks all rules without touching state and
returns what would change; ``_commit`` applies it. Append and restore share that path, so they
enforce the same rules, and a rejected event leaves no trace.
"""

from __future__ import annotations

import logging
import time as _time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dsh.errors import (
    ProjectionError,
    ReentrantAppendError,
    SurfaceError,
    ValidationError,
)
from dsh.event import Event, Replace, SurfaceOp, check_type, parse_surface_op
from dsh.invariants import TurnState
from dsh.json_snapshot import freeze
from dsh.messages import MessageCache
from dsh.node_zero import check_node_zero
from dsh.projections import Interpreter, check_registrable, run_interpreter
from dsh.provenance import check_replace_coverage, check_sources
from dsh.surface import ReplacePlan, Surface
from dsh.tool_rewrite import check_tool_result_rewrite
from dsh.vocabulary import (
    BUILTIN_PROJECTION_TYPES,
    CORE_TYPES,
    SURFACE_TYPES,
    check_data,
    message_of,
)

log = logging.getLogger("dsh.session")

Clock = Callable[[], int]
Listener = Callable[[Event], object]

# What _plan decided: (kind, replace plan, projection decision).
_APPEND = 1
_REPLACE = 2
_LOG = 3
_PROJECTION = 4
_OPAQUE = 5  # an ignorable unknown event: kept, never checked or applied
_Plan = tuple[int, ReplacePlan | None, dict[int, Any] | None]


def _wall_clock() -> int:
    return _time.time_ns() // 1_000_000


def is_append_surface_event(ev: Event) -> bool:
    """True for the events a human transcript shows: surface events appended (not replacements)."""
    return ev.surface_op == "append" and ev.type in SURFACE_TYPES


class Session:
    __slots__ = (
        "_busy",
        "_clock",
        "_events",
        "_invariants",
        "_last_time",
        "_listeners",
        "_messages",
        "_missing",
        "_opaque_types",
        "_overrides",
        "_projections",
        "_surface",
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
        self._surface = Surface()
        self._turns = TurnState()
        self._overrides: dict[int, Any] = {}  # node seq -> message rewritten by a projection
        self._projections: dict[str, Interpreter] = {}
        self._used_projections: set[str] = set()
        self._opaque_types: set[str] = set()
        self._missing: tuple[str, ...] = ()
        self._messages = MessageCache()
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
        type_ = check_type(type, seq)
        if ignorable is not True and ignorable is not False:
            raise ValidationError(
                f"event {seq}: ignorable must be a bool, got {ignorable!r}",
                code="INVALID_IGNORABLE",
            )
        try:
            frozen = freeze(data)
        except ValidationError as exc:
            raise ValidationError(
                f'session event "{type_}" carries non-JSON-serializable data: {exc.message}',
                code=exc.code,
            ) from exc
        op: SurfaceOp = None
        sources: Any = None
        if surface_op == "append" and source_event_seqs is None:
            op = "append"  # the common case needs no copying or parsing
        elif surface_op is not None or source_event_seqs is not None:
            try:
                if (
                    surface_op is not None
                    and surface_op != "append"
                    and not isinstance(surface_op, Replace)
                ):
                    surface_op = freeze(surface_op, "surfaceOp")
                if source_event_seqs is not None:
                    frozen_seqs: Any = freeze(list(source_event_seqs), "sourceEventSeqs")
                    sources = tuple(frozen_seqs)
            except ValidationError as exc:
                raise ValidationError(
                    f'session event "{type_}" carries non-JSON-serializable surface metadata: '
                    f"{exc.message}",
                    code=exc.code,
                ) from exc
            except TypeError as exc:
                raise ValidationError(
                    f'session event "{type_}": sourceEventSeqs must be a list of ints',
                    code="SOURCES_INVALID",
                ) from exc
            op = parse_surface_op(surface_op, type_, strict=not ignorable)
        now = self._clock()
        if now.__class__ is not int:
            now = int(now)
        last = self._last_time
        ev = Event(type_, seq, now if now > last else last, frozen, op, sources, ignorable)
        self._busy = True
        try:
            plan = self._plan(ev)
        finally:
            self._busy = False
        self._commit(ev, plan)
        if self._listeners:
            self._notify(ev)
        return ev

    def _plan(self, ev: Event) -> _Plan:
        t = ev.type
        op = ev.surface_op
        if t in CORE_TYPES:
            if not ev._vetted:
                check_data(t, ev.data, ev.seq)
                object.__setattr__(ev, "_vetted", True)
            sources = ev.source_event_seqs
            if sources is not None:
                sources = check_sources(t, ev.seq, sources)
            rplan: ReplacePlan | None = None
            if t in SURFACE_TYPES:
                if op == "append":
                    kind = _APPEND
                elif type(op) is Replace:
                    kind = _REPLACE
                    rplan = self._plan_replace(ev, op, sources)
                elif op is None:
                    raise SurfaceError(
                        f'event {ev.seq}: surface event "{t}" requires a surfaceOp',
                        code="SURFACE_OP_REQUIRED",
                    )
                else:
                    raise SurfaceError(
                        f'session event "{t}" carries an invalid replace surfaceOp {op!r}',
                        code="INVALID_SURFACE_OP",
                    )
            else:
                if op is not None:
                    raise SurfaceError(
                        f'event {ev.seq}: "{t}" is not a surface type; surfaceOp is forbidden',
                        code="SURFACE_OP_FORBIDDEN",
                    )
                kind = _LOG
            if self._invariants:
                self._turns.check(ev)
            return (kind, rplan, None)
        interpreter = self._projections.get(t)
        if interpreter is not None or t in BUILTIN_PROJECTION_TYPES:
            return (_PROJECTION, None, self._plan_projection(ev, interpreter))
        if ev.ignorable:
            return (_OPAQUE, None, None)
        raise ValidationError(
            f'event {ev.seq}: unknown event type "{t}" must be marked ignorable: true',
            code="UNKNOWN_TYPE",
        )

    def _plan_replace(self, ev: Event, op: Replace, sources: Any) -> ReplacePlan:
        surface = self._surface
        rplan = surface.plan_replace(op, ev.seq)
        check_replace_coverage(ev.seq, sources, rplan.shadowed)
        node0 = surface.node_at(0)
        check_node_zero(ev.type, ev.seq, rplan, None if node0 is None else self._events[node0].type)
        if ev.type == "tool/result":
            target = self._events[rplan.shadowed[0]]
            check_tool_result_rewrite(ev.seq, ev.data, rplan, target.type, target.data)
        return rplan

    def _plan_projection(self, ev: Event, interpreter: Interpreter | None) -> dict[int, Any]:
        if interpreter is None:
            raise ProjectionError(
                f'event {ev.seq}: no interpreter is registered for message projection "{ev.type}"',
                code="PROJECTION_INTERPRETER_MISSING",
            )
        if ev.surface_op is not None or ev.source_event_seqs is not None:
            raise ProjectionError(
                f'event {ev.seq} ("{ev.type}"): a message projection carries neither surfaceOp '
                "nor sourceEventSeqs",
                code="PROJECTION_ENVELOPE",
            )
        surface = self._surface
        return run_interpreter(
            interpreter, ev, surface.nodes, surface.positions(), self._current_message
        )

    def _commit(self, ev: Event, plan: _Plan) -> None:
        kind, rplan, decision = plan
        self._events.append(ev)
        if ev.time > self._last_time:
            self._last_time = ev.time
        if kind == _APPEND:
            self._surface.commit_append(ev.seq)
            self._transcript.append(ev)
        elif kind == _REPLACE:
            self._surface.commit_replace(rplan, ev.seq)  # type: ignore[arg-type]
        elif kind == _PROJECTION:
            self._overrides.update(decision)  # type: ignore[arg-type]
            self._surface.content_generation += 1
            self._used_projections.add(ev.type)
            return
        elif kind == _OPAQUE:
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

    def _current_message(self, seq: int) -> Mapping[str, Any]:
        m = self._overrides.get(seq)
        if m is None:
            ev = self._events[seq]
            m = message_of(ev.type, ev.data)
        return m

    def _typed_message(self, seq: int) -> tuple[str, Mapping[str, Any]]:
        return self._events[seq].type, self._current_message(seq)

    def __len__(self) -> int:
        return len(self._events)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, events={len(self._events)}, surface={self._surface!r})"

    @property
    def surface(self) -> Surface:
        self._check_health()
        return self._surface

    @property
    def invariants(self) -> bool:
        return self._invariants

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
        surface = self._surface
        return self._messages.derive(
            surface.live_nodes(), surface.content_generation, self._typed_message
        )

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
