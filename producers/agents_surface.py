"""The SDK items of a session's surface, read from its end: ``get_items(limit)`` and
``pop_item`` cost the nodes they return or pass, not the session.

Each node's items are serialised once per logged event and kept (a logged event never
changes); every call hands out fresh copies parsed from those bytes, since the SDK may change
the items it is given. This holds while no message projection was ever applied to the session
(its content generation equals its replace generation): then each node's message is its own
event's. Otherwise every call maps the whole surface as ``node_items`` does.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

import dsh
from producers.agents_items import logged_items, node_items


class SurfaceItems:
    __slots__ = ("_nodes",)

    def __init__(self) -> None:
        # node seq -> (its event, its items as JSON array elements, how many, orjson-safe)
        self._nodes: dict[int, tuple[dsh.Event, bytes, int, bool]] = {}

    def last(self, s: dsh.Session, n: int | None) -> list[dict[str, Any]]:
        """The last ``n`` items of the surface (``None`` or a negative ``n``: all of them, as
        the SDK's ``SQLiteSession`` gives)."""
        if n is not None and n < 0:
            n = None
        if n == 0:
            return []
        if not _own_messages(s):
            items = [item for _, its in node_items(s) for item in its]
            return items if n is None else items[-n:]
        parts: list[bytes] = []
        count = 0
        fast = True
        for seq in reversed(s.surface.live_nodes()):
            _, encoded, k, ok = self._node(s, seq)
            if k:
                parts.append(encoded)
                count += k
                fast = fast and ok
                if n is not None and count >= n:
                    break
        parts.reverse()
        got: list[dict[str, Any]] = _loads(b"[" + b",".join(parts) + b"]", fast)
        return got if n is None or count <= n else got[-n:]

    def last_node(self, s: dsh.Session) -> tuple[int, dict[str, Any]] | None:
        """The last node that gives an item, with its last item; None when none does."""
        if not _own_messages(s):
            found = next(((seq, its) for seq, its in reversed(node_items(s)) if its), None)
            return None if found is None else (found[0], found[1][-1])
        for seq in reversed(s.surface.live_nodes()):
            _, encoded, k, ok = self._node(s, seq)
            if k:
                return seq, _loads(b"[" + encoded + b"]", ok)[-1]
        return None

    def _node(self, s: dsh.Session, seq: int) -> tuple[dsh.Event, bytes, int, bool]:
        ev = s.event(seq)
        hit = self._nodes.get(seq)
        # Keyed by the event object too: a copy re-read from the log is another object.
        if hit is not None and hit[0] is ev:
            return hit
        items = logged_items(ev)
        encoded, ok = _dumps(items)
        entry = (ev, encoded[1:-1], len(items), ok)
        self._nodes[seq] = entry
        return entry


def _own_messages(s: dsh.Session) -> bool:
    """True while every node's message is its own event's: each replace raises both
    generations, a message projection only the content one."""
    surface = s.surface
    return surface.content_generation == surface.replace_generation


def _dumps(value: Any) -> tuple[bytes, bool]:
    """JSON of ``value``, and whether orjson wrote it (then orjson reads it back exactly)."""
    try:
        return orjson.dumps(value), True
    except TypeError:  # an int beyond 64 bits, a lone surrogate: what json keeps and orjson not
        return json.dumps(value, separators=(",", ":")).encode(), False


def _loads(data: bytes, fast: bool) -> Any:
    # orjson would read an int beyond 64 bits as a float: only its own output goes to it.
    return orjson.loads(data) if fast else json.loads(data)
