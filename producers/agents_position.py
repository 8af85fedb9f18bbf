"""Where the next SDK item continues a session: the open turn and step, the open step's tool
calls, whether the open turn has model output and the open step tool results, and the last
turn and step numbers.

Folded one event at a time and kept beside the adapter's copy of the session, so planning an
``add_items`` costs the events since the last plan, not a scan of the whole log (which made
the cost of a call grow with the session).
"""

from __future__ import annotations

import dsh


class Position:
    __slots__ = (
        "calls",
        "has_output",
        "has_results",
        "last_step",
        "last_turn",
        "seen",
        "step",
        "turn",
    )

    def __init__(self) -> None:
        self.seen = 0  # events folded: the position is the one after event seen - 1
        self.turn = 0  # open turn (0: none)
        self.step = 0  # open step (0: none)
        self.calls: dict[str, int] = {}  # the open step's tool calls: call id -> tool/call seq
        self.has_output = False  # the open turn has an assistant/message
        self.has_results = False  # the open step has an appended tool/result
        self.last_turn = 0  # the highest turn/start number
        self.last_step = 0  # the last step/start number of the last turn

    @classmethod
    def of(cls, s: dsh.Session) -> Position:
        return cls().advance(s)

    def copy(self) -> Position:
        p = Position()
        p.seen, p.turn, p.step, p.calls = self.seen, self.turn, self.step, dict(self.calls)
        p.has_output, p.has_results = self.has_output, self.has_results
        p.last_turn, p.last_step = self.last_turn, self.last_step
        return p

    def advance(self, s: dsh.Session) -> Position:
        """Fold the events of ``s`` not folded yet (``s`` continues what was folded)."""
        for ev in s.events(self.seen):
            self.fold(ev)
        return self

    def fold(self, ev: dsh.Event) -> None:
        self.seen = ev.seq + 1
        t = ev.type
        if t == "turn/start":
            self.turn, self.step, self.has_output = ev.data["turn"], 0, False
            self.last_turn = max(self.last_turn, int(ev.data["turn"]))
            self.last_step = 0
        elif t == "turn/end":
            self.turn = self.step = 0
        elif t == "step/start":
            self.step, self.calls, self.has_results = ev.data["step"], {}, False
            self.last_step = int(ev.data["step"])
        elif t == "step/end":
            self.step = 0
        elif t == "tool/call":
            self.calls[ev.data["callId"]] = ev.seq
        elif t == "assistant/message":
            self.has_output = True
        elif t == "tool/result" and ev.surface_op == "append":
            self.has_results = True
