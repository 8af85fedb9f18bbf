"""The surface fold: how each event changes the model surface, planned, then committed.

Its state is what the next event's surface effect depends on: the current nodes (with their
positions and the replace and content generations), each current node's type, current message
and, for a tool result, data; and the next seq. :meth:`SurfaceFold.plan` checks every rule of
the surface layer without touching that state (vocabulary, provenance, replace endpoints, node
0, tool-result rewrites, message projections) and returns a :class:`Step`;
:meth:`SurfaceFold.commit` applies the step. ``dsh.Session`` folds its whole log through one of
these and adds what only a full log has: turn invariants, the event list, listeners. A projector
resumes one from the few values it keeps per session (:meth:`SurfaceFold.from_snapshot`).

A *light* fold (``full_checks=False``) keeps only which nodes are current: it skips the two
rules that need a node's type or data (node 0, tool-result rewrite) and runs no interpreter,
for read models that need to know what a replace shadows and nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dsh.errors import ProjectionError, SurfaceError, ValidationError
from dsh.event import Event, Replace
from dsh.messages import MessageCache
from dsh.node_zero import check_node_zero
from dsh.projections import Interpreter, run_interpreter
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

# Step kinds. The first three are core types, which the turn invariants also see.
APPEND = 1  # a surface event appended as a new node
REPLACE = 2  # a surface event taking the place of a range of nodes
LOG = 3  # a log-only core event: no surface effect
PROJECTION = 4  # a message projection: rewrites current nodes' messages
OPAQUE = 5  # an ignorable unknown event: kept, never checked or applied


class Node(NamedTuple):
    """A current node as a snapshot holds it."""

    type: str
    message: Mapping[str, Any]  # the current message: the event's own, or a projection's rewrite
    data: Any = None  # a tool/result's data, which a later rewrite is compared with; else None


_tuple_new = tuple.__new__


class Step:
    """What :meth:`SurfaceFold.plan` decided for one event. Immutable by convention; the steps
    of plain appends and log-only events are shared constants, so planning them allocates
    nothing."""

    __slots__ = ("kind", "replace", "rewrites")

    def __init__(
        self,
        kind: int,
        replace: ReplacePlan | None = None,
        rewrites: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        self.kind = kind
        self.replace = replace
        self.rewrites: Mapping[int, Mapping[str, Any]] = rewrites or {}

    @property
    def adds_node(self) -> bool:
        """Whether the event becomes a current node (an append or a replace)."""
        return self.kind <= REPLACE

    @property
    def shadowed(self) -> tuple[int, ...]:
        """The nodes a replace takes off the surface, in surface order."""
        return () if self.replace is None else self.replace.shadowed

    @property
    def rewritten(self) -> tuple[int, ...]:
        """The nodes whose message a projection rewrites."""
        return tuple(self.rewrites)

    def __repr__(self) -> str:
        return f"Step(kind={self.kind}, shadowed={self.shadowed}, rewritten={self.rewritten})"


_APPEND_STEP = Step(APPEND)
_LOG_STEP = Step(LOG)
_OPAQUE_STEP = Step(OPAQUE)


class SurfaceChange(NamedTuple):
    """What one event did to the surface (what :meth:`SurfaceFold.apply` reports)."""

    added: int | None = None  # the event's seq when it became a node
    shadowed: tuple[int, ...] = ()
    rewritten: tuple[int, ...] = ()  # nodes whose message a projection changed


NO_CHANGE = SurfaceChange()


@dataclass(frozen=True, slots=True)
class FoldSnapshot:
    """A fold's state as values: what a projector keeps per session, and resumes from.

    ``records`` holds one :class:`Node` per current node; ``None`` makes a light fold."""

    next_seq: int
    nodes: tuple[int, ...]
    records: Mapping[int, Node] | None
    replace_generation: int = 0
    content_generation: int = 0


class SurfaceFold:
    """The resumable surface fold; ``SurfaceFold()`` is the state before seq 0.

    ``log``, if given, is the list of the events folded so far, by seq, which the caller keeps
    (a Session's own): the fold then reads each node's type, data and own message from it
    instead of keeping copies, so an append costs no more than the surface update. A fold
    without one (a projector's, or one resumed from a snapshot) keeps them itself."""

    __slots__ = (
        "_cache",
        "_data",
        "_full",
        "_keeps",
        "_log",
        "_messages",
        "_types",
        "next_seq",
        "surface",
    )

    def __init__(self, *, full_checks: bool = True, log: Sequence[Event] | None = None) -> None:
        self.surface = Surface()
        self.next_seq = 0  # the seq the next event must have
        self._full = full_checks
        self._log = log if full_checks else None
        self._keeps = full_checks and log is None
        # Per current node: its type, its current message and, for a tool result, its data.
        # With a log, only the messages a projection rewrote; a light fold keeps nothing. Flat
        # maps rather than a record per node, so an append allocates no object for the cycle
        # collector to track.
        self._types: dict[int, str] = {}
        self._messages: dict[int, Mapping[str, Any]] = {}
        self._data: dict[int, Any] = {}
        self._cache: MessageCache | None = None  # built on the first derive_messages()

    @classmethod
    def from_snapshot(cls, snapshot: FoldSnapshot) -> SurfaceFold:
        records = snapshot.records
        fold = cls(full_checks=records is not None)
        surface = fold.surface
        for seq in snapshot.nodes:
            surface.commit_append(seq)
        surface.replace_generation = snapshot.replace_generation
        surface.content_generation = snapshot.content_generation
        for seq, node in (records or {}).items():
            fold._types[seq] = node.type
            fold._messages[seq] = node.message
            if node.data is not None:
                fold._data[seq] = node.data
        fold.next_seq = snapshot.next_seq
        return fold

    def snapshot(self) -> FoldSnapshot:
        surface = self.surface
        return FoldSnapshot(
            self.next_seq,
            surface.nodes,
            {seq: self.node(seq) for seq in surface.nodes} if self._full else None,
            surface.replace_generation,
            surface.content_generation,
        )

    @property
    def full_checks(self) -> bool:
        return self._full

    def __repr__(self) -> str:
        light = "" if self._full else ", light"
        return f"SurfaceFold(next_seq={self.next_seq}, {self.surface!r}{light})"

    # -- reads ----------------------------------------------------------------------------

    def node(self, seq: int) -> Node:
        """The current node ``seq``, which must be one."""
        if not self._full:
            raise ValueError("a light surface fold keeps no node types or messages")
        type_, message = self._typed_message(seq)
        return _tuple_new(Node, (type_, message, self._data_of(seq)))

    def message(self, seq: int) -> Mapping[str, Any]:
        """The current message of node ``seq``, which must be one."""
        m = self._messages.get(seq)
        if m is None:
            log = self._log
            if log is None:
                raise KeyError(seq)
            ev = log[seq]
            m = message_of(ev.type, ev.data)
        return m

    def derive_messages(self) -> list[Mapping[str, Any]]:
        """What the model sees next: a fresh list each call, of shared immutable messages.

        Incremental: while only appends happened since the last call, it visits the new nodes
        alone."""
        if not self._full:
            raise ValueError("a light surface fold keeps no node types or messages")
        cache = self._cache
        if cache is None:
            cache = self._cache = MessageCache()
        surface = self.surface
        return cache.derive(surface.live_nodes(), surface.content_generation, self._typed_message)

    def _typed_message(self, seq: int) -> tuple[str, Mapping[str, Any]]:
        log = self._log
        if log is None:
            return self._types[seq], self._messages[seq]
        ev = log[seq]
        m = self._messages.get(seq)
        return ev.type, (message_of(ev.type, ev.data) if m is None else m)

    def _type(self, seq: int) -> str:
        log = self._log
        return self._types[seq] if log is None else log[seq].type

    def _data_of(self, seq: int) -> Any:
        log = self._log
        if log is None:
            return self._data.get(seq)
        ev = log[seq]
        return ev.data if ev.type == "tool/result" else None

    # -- plan and commit ------------------------------------------------------------------

    def plan(self, ev: Event, interpreters: Mapping[str, Interpreter]) -> Step:
        """Check ``ev`` against every surface rule without touching the state.

        ``interpreters`` are the registered message projections. Raises the core's
        ``SessionError`` of the first rule ``ev`` breaks; else returns the step to commit."""
        seq = ev.seq
        if seq != self.next_seq:
            raise ValidationError(
                f"event {seq}: the next seq is {self.next_seq}", code="SEQ_NOT_NEXT"
            )
        t = ev.type
        if t in CORE_TYPES:
            if not ev.vetted:
                # Context-free checks: once per Event object (restoring events this process
                # already validated, or planning one for several projections, skips them).
                check_data(t, ev.data, seq)
                object.__setattr__(ev, "vetted", True)
            sources = ev.source_event_seqs
            if sources is not None:
                sources = check_sources(t, seq, sources)
            op = ev.surface_op
            if t not in SURFACE_TYPES:
                if op is not None:
                    raise SurfaceError(
                        f'event {seq}: "{t}" is not a surface type; surfaceOp is forbidden',
                        code="SURFACE_OP_FORBIDDEN",
                    )
                return _LOG_STEP
            if op == "append":
                return _APPEND_STEP
            if type(op) is Replace:
                return Step(REPLACE, self._plan_replace(ev, op, sources))
            if op is None:
                raise SurfaceError(
                    f'event {seq}: surface event "{t}" requires a surfaceOp',
                    code="SURFACE_OP_REQUIRED",
                )
            raise SurfaceError(
                f'session event "{t}" carries an invalid replace surfaceOp {op!r}',
                code="INVALID_SURFACE_OP",
            )
        interpreter = interpreters.get(t)
        if interpreter is not None or t in BUILTIN_PROJECTION_TYPES:
            return Step(PROJECTION, None, self._plan_projection(ev, interpreter))
        if ev.ignorable:
            return _OPAQUE_STEP  # its surfaceOp / sourceEventSeqs are opaque data
        if not self._full:
            # A light fold (a projector that runs no interpreter) folds a log the writer
            # validated: a type it took that is neither core nor ignorable was one of its
            # registered message projections, whose output a light fold never needs.
            return Step(PROJECTION, None, self._plan_projection(ev, None))
        raise ValidationError(
            f'event {seq}: unknown event type "{t}" must be marked ignorable: true',
            code="UNKNOWN_TYPE",
        )

    def _plan_replace(self, ev: Event, op: Replace, sources: Sequence[int] | None) -> ReplacePlan:
        surface = self.surface
        rplan = surface.plan_replace(op, ev.seq)
        check_replace_coverage(ev.seq, sources, rplan.shadowed)
        if self._full:
            node0 = surface.node_at(0)
            check_node_zero(ev.type, ev.seq, rplan, None if node0 is None else self._type(node0))
            if ev.type == "tool/result":
                target = rplan.shadowed[0]
                check_tool_result_rewrite(
                    ev.seq, ev.data, rplan, self._type(target), self._data_of(target)
                )
        return rplan

    def _plan_projection(
        self, ev: Event, interpreter: Interpreter | None
    ) -> Mapping[int, Mapping[str, Any]]:
        full = self._full
        if interpreter is None and full:
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
        if interpreter is None or not full:
            return {}
        surface = self.surface
        return run_interpreter(interpreter, ev, surface.nodes, surface.positions(), self.message)

    def commit(self, ev: Event, step: Step) -> None:
        """Apply ``step``, which :meth:`plan` returned for ``ev`` against this very state."""
        kind = step.kind
        seq = ev.seq
        if kind == APPEND:
            self.surface.commit_append(seq)
            if self._keeps:
                self._keep(ev)
        elif kind == REPLACE:
            rplan: ReplacePlan = step.replace  # type: ignore[assignment]
            self.surface.commit_replace(rplan, seq)
            messages = self._messages
            for old in rplan.shadowed:
                messages.pop(old, None)
            if self._keeps:
                types, data = self._types, self._data
                for old in rplan.shadowed:
                    del types[old]
                    data.pop(old, None)
                self._keep(ev)
        elif kind == PROJECTION:
            if self._full:
                self._messages.update(step.rewrites)
            self.surface.content_generation += 1
        self.next_seq = seq + 1

    def _keep(self, ev: Event) -> None:
        seq, t = ev.seq, ev.type
        self._types[seq] = t
        self._messages[seq] = message_of(t, ev.data)
        if t == "tool/result":
            self._data[seq] = ev.data

    def apply(self, ev: Event, interpreters: Mapping[str, Interpreter]) -> SurfaceChange:
        """:meth:`plan` then :meth:`commit`; returns what changed."""
        step = self.plan(ev, interpreters)
        self.commit(ev, step)
        kind = step.kind
        if kind in (LOG, OPAQUE):
            return NO_CHANGE
        if kind == PROJECTION:
            return _tuple_new(SurfaceChange, (None, (), tuple(step.rewrites)))
        return _tuple_new(SurfaceChange, (ev.seq, step.shadowed, ()))
