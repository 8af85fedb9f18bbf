"""What a projection is to the runtime: its keys, how to load its per-session state from Redis,
and how to plan one event's writes against that state.

Planning is pure Python; applying is one call of ``lua/apply.lua`` per event, which writes the
planned ops only if the event's seq is the session's next. Plans are deterministic functions of
(state at seq - 1, event), so two processes that both apply an event write the same thing.

The state of every projection is the core's own surface fold (``dsh.fold.SurfaceFold``),
resumed from what the projection keeps in Redis: the projectors apply the core's rules, not a
copy of them. Turn invariants are the writer's job and are not re-checked here; ``dsh verify``
compares the result with a ``dsh.Session`` restored from the same log.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import orjson

from dsh.errors import ProjectionError
from dsh.event import Event, Replace
from dsh.fold import FoldSnapshot, SurfaceChange, SurfaceFold
from dsh.projections import Interpreter
from projectors.errors import MissingInterpreterError, PoisonRecordError
from projectors.keys import Keys

S = TypeVar("S")
Op = str | int
META = 1  # KEYS index of the meta hash in every projection


def dumps(value: Any) -> str:
    """Compact JSON text. orjson writes what ``json.dumps(separators=(",", ":"),
    ensure_ascii=False)`` writes for our values (string keys, finite floats; the frozen
    containers are dict and list subclasses) at a tenth of the cost; integers beyond 64 bits,
    which orjson refuses, take the standard library's path."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def wire_of(ev: Event) -> dict[str, Any]:
    """The event's wire JSON for ``dumps``, sharing its frozen data instead of thawing a copy
    as ``Event.to_json()`` does (the frozen containers are dict and list subclasses)."""
    out: dict[str, Any] = {"type": ev.type, "seq": ev.seq, "time": ev.time, "data": ev.data}
    op = ev.surface_op
    if op is not None:
        out["surfaceOp"] = op.to_json() if isinstance(op, Replace) else op
    if ev.source_event_seqs is not None:
        out["sourceEventSeqs"] = ev.source_event_seqs
    if ev.ignorable:
        out["ignorable"] = True
    return out


def as_int(value: bytes | str | None, default: int) -> int:
    return default if value is None else int(value)


def advance(fold: SurfaceFold, ev: Event, interpreters: Mapping[str, Interpreter]) -> SurfaceChange:
    """Apply one event to ``fold`` with the core's rules, or raise without touching it.

    The core's errors pass through, but for three that mean something else to a projector: a
    seq that is not the next one, and a projection event with a surfaceOp or sources, are
    poison records; a projection this process has no interpreter for blocks the session until
    one is given (``MISSING_INTERPRETER``)."""
    if ev.seq != fold.next_seq:
        raise PoisonRecordError(f"event {ev.seq}: the session's next seq is {fold.next_seq}")
    try:
        return fold.apply(ev, interpreters)
    except ProjectionError as exc:
        if exc.code == "PROJECTION_INTERPRETER_MISSING":
            raise MissingInterpreterError(exc.message) from exc
        if exc.code == "PROJECTION_ENVELOPE":
            raise PoisonRecordError(exc.message) from exc
        raise


class Projection(ABC, Generic[S]):
    name: str
    # Sessions kept in the projection's recent index (Keys.recent), the most recently moved;
    # 0: no index. Each batch adds its sessions and trims the rest.
    recent_sessions: int = 0

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    @abstractmethod
    def data_keys(self, session_id: str) -> list[str]:
        """The KEYS of the apply script after the meta hash, in the order ops refer to them."""

    def all_keys(self, session_id: str) -> list[str]:
        return [self.keys.meta(self.name, session_id), *self.data_keys(session_id)]

    @abstractmethod
    def fresh(self) -> S:
        """The state before seq 0."""

    @abstractmethod
    def load_reads(self, session_id: str) -> list[tuple[Any, ...]]:
        """Redis commands whose replies :meth:`load` turns into the session's state."""

    @abstractmethod
    def load(self, replies: Sequence[Any]) -> S:
        """State from the replies of :meth:`load_reads` (the meta hash first)."""

    @abstractmethod
    def applied(self, state: S) -> int: ...

    @abstractmethod
    def plan(self, state: S, ev: Event) -> list[Op]:
        """Advance ``state`` by one event and return the ops that do the same in Redis.

        Raises a :class:`dsh.errors.SessionError` without touching ``state`` when the event can
        never be applied (the runtime blocks the session and sends the record to the DLQ).
        """


class NodesProjection(Projection[SurfaceFold]):
    """A projection that keeps the current node list (a Redis list, its last KEY) next to its
    data: enough to know what a replace shadows and to refuse a replace the core would refuse.
    An append is one RPUSH; only a replace rewrites the list, on the server. Its state is a
    light fold: which nodes are current, nothing about them."""

    def fresh(self) -> SurfaceFold:
        return SurfaceFold(full_checks=False)

    def nodes_key(self, session_id: str) -> str:
        return self.keys.session(session_id, self.name, "nodes")

    def load_reads(self, session_id: str) -> list[tuple[Any, ...]]:
        return [
            ("HGET", self.keys.meta(self.name, session_id), "applied"),
            ("LRANGE", self.nodes_key(session_id), 0, -1),
        ]

    def load(self, replies: Sequence[Any]) -> SurfaceFold:
        applied, nodes = replies[:2]
        seqs = tuple(int(n) for n in nodes)
        return SurfaceFold.from_snapshot(FoldSnapshot(as_int(applied, -1) + 1, seqs, None))

    def applied(self, state: SurfaceFold) -> int:
        return state.next_seq - 1

    def advance(self, state: SurfaceFold, ev: Event) -> SurfaceChange:
        # Light: the builtin projection types are known without interpreters, and none is run.
        return advance(state, ev, {})

    @staticmethod
    def node_ops(change: SurfaceChange, index: int) -> list[Op]:
        if change.added is None:
            return []
        if change.shadowed:
            return ["L", index, change.shadowed[0], change.shadowed[-1], change.added]
        return ["R", index, change.added]
