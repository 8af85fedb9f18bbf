"""What a projection is to the runtime: its keys, how to load its per-session state from Redis,
and how to plan one event's writes against that state.

Planning is pure Python; applying is one call of ``lua/apply.lua`` per event, which writes the
planned ops only if the event's seq is the session's next. Plans are deterministic functions of
(state at seq - 1, event), so two processes that both apply an event write the same thing.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import orjson

from dsh.event import Event, Replace
from projectors.keys import Keys
from projectors.surface_model import Node, SurfaceChange, SurfaceState

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


class Projection(ABC, Generic[S]):
    name: str

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


class NodesProjection(Projection[SurfaceState]):
    """A projection that keeps the current node list (a Redis list, its last KEY) next to its
    data: enough to know what a replace shadows and to refuse a replace the core would refuse.
    An append is one RPUSH; only a replace rewrites the list, on the server."""

    def fresh(self) -> SurfaceState:
        return SurfaceState()

    def nodes_key(self, session_id: str) -> str:
        return self.keys.session(session_id, self.name, "nodes")

    def load_reads(self, session_id: str) -> list[tuple[Any, ...]]:
        return [
            ("HGET", self.keys.meta(self.name, session_id), "applied"),
            ("LRANGE", self.nodes_key(session_id), 0, -1),
        ]

    def load(self, replies: Sequence[Any]) -> SurfaceState:
        applied, nodes = replies[:2]
        seqs = [int(n) for n in nodes]
        info = {seq: Node("", None) for seq in seqs}
        return SurfaceState.restore(as_int(applied, -1), seqs, info, 0, 0)

    def applied(self, state: SurfaceState) -> int:
        return state.applied

    @staticmethod
    def node_ops(change: SurfaceChange, index: int) -> list[Op]:
        if change.added is None:
            return []
        if change.shadowed:
            return ["L", index, change.shadowed[0], change.shadowed[-1], change.added]
        return ["R", index, change.added]
