"""Crash repair: closing a turn that a crash left open (``Session.close_interrupted_turn``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh.event import Event

if TYPE_CHECKING:
    from dsh.session import Session

OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
NOT_STARTED = "TOOL_NOT_STARTED"


def _error_result(turn: int, step: int, call_id: str, code: str, reason: str) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"{call_id}:{code.lower()}",
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call_id,
                    "content": [{"type": "text", "text": reason}],
                    "isError": True,
                }
            ],
            "source": {"kind": "tool", "callId": call_id},
        },
        "error": {"name": "ToolInterrupted", "code": code, "reason": reason},
    }


def close_interrupted_turn(session: Session) -> tuple[Event, ...]:
    """Append the events that close the open turn; nothing when no turn is open.

    Each closer goes through ``append``, so every rule still applies to it.
    """
    state = session.turns
    turn = state.open_turn
    if turn is None:
        return ()
    closers: list[Event] = []
    step = state.open_step
    if step is not None:
        # Snapshot before appending: each append updates the tracked state.
        calls = list(state.calls.items())
        answered = set(state.answered)
        requested = [c for c in state.requested if c not in state.calls]
        requested_seq = state.requested_seq
        for call_id, call_seq in calls:
            if call_id not in answered:
                data = _error_result(
                    turn,
                    step,
                    call_id,
                    OUTCOME_UNKNOWN,
                    "the session stopped before this tool call reported an outcome",
                )
                closers.append(session.append("tool/result", data, "append", [call_seq]))
        for call_id in dict.fromkeys(requested):
            if call_id not in answered:
                data = _error_result(
                    turn,
                    step,
                    call_id,
                    NOT_STARTED,
                    "the session stopped before this tool call was dispatched",
                )
                cite = None if requested_seq is None else [requested_seq]
                closers.append(session.append("tool/result", data, "append", cite))
        closers.append(session.append("step/end", {"turn": turn, "step": step}))
    closers.append(session.append("turn/end", {"turn": turn, "reason": {"kind": "interrupted"}}))
    return tuple(closers)
