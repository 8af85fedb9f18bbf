"""The audit projection: provenance, for every event.

Per event, a record of what it cites, what it shadowed (replace) and the data an auditor asks
for (request headers and contexts, attempts, tool errors, turn ends, fork lineage, message
projections); reverse links say what later cited or shadowed each event, so "what did this
summary replace" and "what replaced this message" are one read each.

Keys of session ``S`` (prefix ``<prefix>:{S}:audit``): ``meta`` (applied, blocked), ``nodes``
(current nodes, a list), ``events`` (seq → record), ``cited_by`` (seq → "a,b,…"),
``shadowed_by`` (seq → seq), ``index`` (requests / attempts / errors / turns / lineage /
projections / replaces → "a,b,…").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.event import Event
from dsh.fold import SurfaceFold
from dsh.vocabulary import BUILTIN_PROJECTION_TYPES, CORE_TYPES
from projectors.projection import NodesProjection, Op, dumps, wire_of

EVENTS, CITED_BY, SHADOWED_BY, INDEX, NODES = 2, 3, 4, 5, 6
# Types whose data the audit keeps whole, and the index each is listed under.
INDEXED = {
    "request/header": "requests",
    "request/context": "requests",
    "assistant/attempt": "attempts",
    "turn/end": "turns",
    "session/end-seed": "lineage",
    "tool/call": "calls",
    "compaction/start": "compactions",
    "compaction/end": "compactions",
}


def tool_error(ev: Event) -> Any:
    """The error of a failed tool result (``data.error`` or an ``isError`` block), else None."""
    data = ev.data
    if not isinstance(data, Mapping):
        return None
    if data.get("error") is not None:
        return data["error"]
    content = (data.get("message") or {}).get("content") or []
    failed = [b for b in content if isinstance(b, Mapping) and b.get("isError")]
    return {"isError": True, "toolCallId": failed[0].get("toolCallId")} if failed else None


class AuditProjection(NodesProjection):
    """Tracks which nodes are current, so a replace knows the range it shadows."""

    name = "audit"

    def data_keys(self, session_id: str) -> list[str]:
        return [
            self.keys.session(session_id, "audit", part)
            for part in ("events", "cited_by", "shadowed_by", "index", "nodes")
        ]

    def plan(self, state: SurfaceFold, ev: Event) -> list[Op]:
        seq = ev.seq
        change = self.advance(state, ev)
        wire = wire_of(ev)
        record: dict[str, Any] = {"type": ev.type, "time": ev.time}
        for key in ("surfaceOp", "sourceEventSeqs", "ignorable"):
            if key in wire:
                record[key] = wire[key]
        ops: list[Op] = []
        index = INDEXED.get(ev.type)
        if ev.type in BUILTIN_PROJECTION_TYPES:
            index = "projections"
        if index is not None:
            record["data"] = wire["data"]
        if change.shadowed:
            # A replacement keeps its data: once replaced in turn (a summary of summaries) no
            # other read model has its message, and "what did it say" is an auditor's question.
            record["data"] = wire["data"]
            record["shadowed"] = list(change.shadowed)
            index = "replaces"
            for node in change.shadowed:
                ops += ["H", SHADOWED_BY, node, seq]
        error = tool_error(ev) if ev.type == "tool/result" else None
        if error is not None:
            record["error"] = error
            ops += ["A", INDEX, "errors", seq]
        if index is not None:
            ops += ["A", INDEX, index, seq]
        if ev.type in CORE_TYPES and ev.source_event_seqs:
            for source in ev.source_event_seqs:  # type: ignore[union-attr]
                ops += ["A", CITED_BY, source, seq]
        ops += ["H", EVENTS, seq, dumps(record)]
        return ops + self.node_ops(change, NODES)
