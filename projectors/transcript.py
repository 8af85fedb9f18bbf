"""The transcript projection: the human timeline as one Redis Stream per session.

Entries are the append-origin surface events (what ``Session.transcript()`` returns) and tool
progress (tool calls, attempts, turn boundaries), in log order. The entry id of event ``seq``
is ``<seq>-1``: XADD with an explicit id refuses an id at or below the stream's top, so a
replayed event can never be added twice, a UI tails the stream with XREAD BLOCK, and
``XRANGE key 7 7`` finds event 7. Compaction never removes an entry: a compacted turn stays.

Keys of session ``S``: ``<prefix>:{S}:transcript:meta`` (applied, blocked),
``<prefix>:{S}:transcript`` (the stream) and ``<prefix>:{S}:transcript:nodes`` (current nodes).
"""

from __future__ import annotations

from dsh.event import Event
from dsh.fold import SurfaceFold
from dsh.session import is_append_surface_event
from projectors.projection import NodesProjection, Op, dumps, wire_of

STREAM, NODES = 2, 3
PROGRESS_TYPES = frozenset({"tool/call", "assistant/attempt", "turn/start", "turn/end"})


def entry_id(seq: int) -> str:
    return f"{seq}-1"


def kind_of(ev: Event) -> str | None:
    """``surface`` for an append-origin surface event, ``progress`` for tool progress, else None."""
    if is_append_surface_event(ev):
        return "surface"
    return "progress" if ev.type in PROGRESS_TYPES else None


class TranscriptProjection(NodesProjection):
    """Tracks which nodes are current only to refuse what the core refuses, like the audit."""

    name = "transcript"
    recent_sessions = 10_000  # the session inspector's list of the sessions that moved last

    def data_keys(self, session_id: str) -> list[str]:
        return [self.keys.session(session_id, "transcript"), self.nodes_key(session_id)]

    def plan(self, state: SurfaceFold, ev: Event) -> list[Op]:
        change = self.advance(state, ev)
        kind = kind_of(ev)
        ops: list[Op] = []
        if kind is not None:
            fields = ("kind", kind, "type", ev.type, "event", dumps(wire_of(ev)))
            ops += ["X", STREAM, entry_id(ev.seq), len(fields) // 2, *fields]
        return ops + self.node_ops(change, NODES)
