"""Turn / step / tool invariants (contract §3), tracked in O(1) per event.

``TurnState`` always tracks the open turn, step and tool calls (crash repair and fork need
them); ``check`` is only called when the session enforces invariants.
"""

from __future__ import annotations

from typing import Any

from dsh.errors import InvariantError
from dsh.event import Event

# Types that must name the open turn and step.
_NAMES_OPEN_STEP = frozenset(
    {"system/message", "assistant/message", "assistant/attempt", "tool/call", "step/end"}
)


# Types that change the tracked state.
_TRACKED = frozenset(
    {"turn/start", "turn/end", "step/start", "step/end", "tool/call", "tool/result"}
    | {"assistant/message"}
)


def _err(ev: Event, what: str, code: str) -> InvariantError:
    return InvariantError(f"event {ev.seq} ({ev.type}): {what}", code=code)


class TurnState:
    __slots__ = (
        "answered",
        "calls",
        "last_step",
        "last_turn",
        "open_step",
        "open_turn",
        "requested",
        "requested_seq",
    )

    def __init__(self) -> None:
        self.last_turn = 0
        self.open_turn: int | None = None
        self.last_step = 0
        self.open_step: int | None = None
        self.calls: dict[str, int] = {}  # tool/call callId -> seq, in the open step
        self.answered: set[str] = set()
        self.requested: tuple[str, ...] = ()  # tool-call ids of the step's last assistant message
        self.requested_seq: int | None = None

    def check(self, ev: Event) -> None:
        t = ev.type
        data: Any = ev.data
        if t == "user/message" or t == "session/end-seed":
            return
        if t == "turn/start":
            if self.open_turn is not None:
                raise _err(ev, f"turn {self.open_turn} is still open", "TURN_ALREADY_OPEN")
            if data["turn"] != self.last_turn + 1:
                raise _err(
                    ev, f"data.turn must be {self.last_turn + 1}, got {data['turn']}", "TURN_NUMBER"
                )
            return
        if t == "tool/result" and type(ev.surface_op) is not str:
            self._need_turn(ev, named=False)  # a rewrite needs only an open turn
            return
        if t.startswith("request/"):
            self._need_turn(ev, named=False)
            return
        if t == "turn/end":
            self._need_turn(ev, named=True)
            if self.open_step is not None:
                raise _err(ev, f"step {self.open_step} is still open", "STEP_STILL_OPEN")
            return
        if t == "step/start":
            self._need_turn(ev, named=True)
            if self.open_step is not None:
                raise _err(ev, f"step {self.open_step} is still open", "STEP_ALREADY_OPEN")
            if data["step"] != self.last_step + 1:
                raise _err(
                    ev, f"data.step must be {self.last_step + 1}, got {data['step']}", "STEP_NUMBER"
                )
            return
        if t in _NAMES_OPEN_STEP or t == "tool/result":
            self._need_step(ev)
            if t == "tool/call":
                if data["callId"] in self.calls:
                    raise _err(
                        ev,
                        f"tool call {data['callId']!r} was already dispatched in this step",
                        "TOOL_CALL_DUPLICATE",
                    )
            elif t == "tool/result":
                self._check_answer(ev, data)

    def _need_turn(self, ev: Event, *, named: bool) -> None:
        if self.open_turn is None:
            raise _err(ev, "needs an open turn", "NO_OPEN_TURN")
        if named and ev.data["turn"] != self.open_turn:
            raise _err(
                ev,
                f"data.turn {ev.data['turn']} does not name the open turn {self.open_turn}",
                "TURN_MISMATCH",
            )

    def _need_step(self, ev: Event) -> None:
        self._need_turn(ev, named=True)
        if self.open_step is None:
            raise _err(ev, f"needs an open step in turn {self.open_turn}", "NO_OPEN_STEP")
        if ev.data["step"] != self.open_step:
            raise _err(
                ev,
                f"data.step {ev.data['step']} does not name the open step {self.open_step}",
                "STEP_MISMATCH",
            )

    def _check_answer(self, ev: Event, data: Any) -> None:
        call_id = data["message"]["source"]["callId"]
        if call_id in self.answered:
            raise _err(ev, f"tool call {call_id!r} already has a result", "TOOL_RESULT_DUPLICATE")
        if call_id in self.calls:
            return
        err = data.get("error")
        if isinstance(err, dict) and err.get("code") == "TOOL_NOT_STARTED":
            return
        raise _err(
            ev,
            f"answers tool call {call_id!r}, which no tool/call of the open step dispatched",
            "TOOL_RESULT_UNMATCHED",
        )

    def apply(self, ev: Event) -> None:
        t = ev.type
        if t not in _TRACKED:
            return
        data: Any = ev.data
        if t == "turn/start":
            self.open_turn = data["turn"]
            self.last_turn = max(self.last_turn, data["turn"])
            self.last_step = 0
            self._reset_step(None)
        elif t == "turn/end":
            self.open_turn = None
            self._reset_step(None)
        elif t == "step/start":
            self.last_step = max(self.last_step, data["step"])
            self._reset_step(data["step"])
        elif t == "step/end":
            self._reset_step(None)
        elif t == "tool/call":
            self.calls[data["callId"]] = ev.seq
        elif t == "tool/result" and ev.surface_op == "append":
            self.answered.add(data["message"]["source"]["callId"])
        elif t == "assistant/message" and ev.surface_op == "append":
            self.requested = tuple(
                b["id"] for b in data["message"]["content"] if b["type"] == "tool-call"
            )
            self.requested_seq = ev.seq

    def _reset_step(self, step: int | None) -> None:
        self.open_step = step
        if self.calls:
            self.calls = {}
        if self.answered:
            self.answered = set()
        self.requested = ()
        self.requested_seq = None
