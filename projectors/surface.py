"""The surface projection: the model's view — current nodes, each node's current message
(message projections applied through the same interpreters the core uses), generations.

Keys of session ``S``: ``<prefix>:{S}:surface:meta`` (applied, rg, cg, blocked),
``<prefix>:{S}:surface:nodes`` (the current nodes, a list) and
``<prefix>:{S}:surface:messages`` (node seq → ``{"type", "message", "data"?}``, current nodes
only; ``data`` is kept for tool results, which a rewrite is checked against).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dsh.event import Event
from dsh.fold import FoldSnapshot, Node, SurfaceFold
from dsh.json_snapshot import freeze
from dsh.projections import Interpreter
from projectors.keys import Keys
from projectors.projection import META, NodesProjection, Op, Projection, advance, as_int, dumps

MESSAGES, NODES = 2, 3


def node_record(node: Node) -> dict[str, Any]:
    record = {"type": node.type, "message": node.message}
    if node.data is not None:
        record["data"] = node.data
    return record


class SurfaceProjection(Projection[SurfaceFold]):
    name = "surface"

    def __init__(self, keys: Keys, interpreters: Mapping[str, Interpreter] | None = None) -> None:
        super().__init__(keys)
        self.interpreters = dict(interpreters or {})

    def data_keys(self, session_id: str) -> list[str]:
        return [
            self.keys.session(session_id, "surface", "messages"),
            self.keys.session(session_id, "surface", "nodes"),
        ]

    def fresh(self) -> SurfaceFold:
        return SurfaceFold()

    def load_reads(self, session_id: str) -> list[tuple[Any, ...]]:
        meta, messages, nodes = self.all_keys(session_id)
        return [("HGETALL", meta), ("HGETALL", messages), ("LRANGE", nodes, 0, -1)]

    def load(self, replies: Sequence[Any]) -> SurfaceFold:
        meta, messages, nodes = replies
        records = {}
        for field, value in messages.items():
            record = json.loads(value)
            data = record.get("data")
            records[int(field)] = Node(
                record["type"],
                freeze(record["message"]),
                None if data is None else freeze(data),
            )
        snapshot = FoldSnapshot(
            as_int(meta.get(b"applied"), -1) + 1,
            tuple(int(n) for n in nodes),
            records,
            as_int(meta.get(b"rg"), 0),
            as_int(meta.get(b"cg"), 0),
        )
        return SurfaceFold.from_snapshot(snapshot)

    def applied(self, state: SurfaceFold) -> int:
        return state.next_seq - 1

    def plan(self, state: SurfaceFold, ev: Event) -> list[Op]:
        surface = state.surface
        before = (surface.replace_generation, surface.content_generation)
        change = advance(state, ev, self.interpreters)
        ops: list[Op] = []
        for node in change.shadowed:
            ops += ["D", MESSAGES, node]
        added = () if change.added is None else (change.added,)
        for node in (*added, *change.rewritten):
            ops += ["H", MESSAGES, node, dumps(node_record(state.node(node)))]
        ops += NodesProjection.node_ops(change, NODES)
        if before != (surface.replace_generation, surface.content_generation):
            ops += ["H", META, "rg", surface.replace_generation]
            ops += ["H", META, "cg", surface.content_generation]
        return ops
