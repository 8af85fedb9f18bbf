"""Builders of valid data for each event type, and of sessions at a turn: one set for every
test suite (core, writer, projectors, reliability, contract)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import dsh

CLOCK_MS = 1_700_000_000_000


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def user(
    mid: str = "u", body: str = "hi", *, content: list[Any] | None = None, **source: Any
) -> dict[str, Any]:
    """A user message: ``body`` as one text block, or ``content`` as given."""
    return {
        "id": mid,
        "role": "user",
        "content": content if content is not None else [text(body)] if body else [],
        "source": source or {"kind": "user"},
    }


def system(
    turn: int = 1, step: int = 1, mid: str = "sys", body: str = "be terse"
) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": mid,
            "role": "system",
            "content": [text(body)] if body else [],
            "source": {"kind": "plugin", "plugin": "system-prompt"},
        },
    }


def assistant(
    turn: int = 1,
    step: int = 1,
    mid: str = "a",
    body: str = "ok",
    calls: Iterable[str] = (),
    stream: list[Any] | None = None,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [text(body)] if body else []
    content += [{"type": "tool-call", "id": c, "name": "echo", "arguments": "{}"} for c in calls]
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": mid,
            "role": "assistant",
            "content": content,
            "source": {"kind": "model", "provider": "mock", "model": "m1"},
        },
        "stream": stream or [],
    }


def tool_call(call: str = "c1", turn: int = 1, step: int = 1) -> dict[str, Any]:
    return {"turn": turn, "step": step, "callId": call, "name": "echo", "arguments": "{}"}


def tool_result(
    call: str = "c1", turn: int = 1, step: int = 1, body: str = "out", **extra: Any
) -> dict[str, Any]:
    is_error = "error" in extra
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"r-{call}",
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call,
                    "content": [text(body)],
                    "isError": is_error,
                }
            ],
            "source": {"kind": "tool", "callId": call},
        },
        **extra,
    }


def new(invariants: bool = True) -> dsh.Session:
    return dsh.Session.create("t", clock=lambda: CLOCK_MS, invariants=invariants)


def in_step(invariants: bool = True) -> dsh.Session:
    """seq 0 turn/start, 1 user, 2 step/start — turn 1 step 1 open."""
    s = new(invariants)
    s.append("turn/start", {"turn": 1})
    s.append("user/message", user(), "append")
    s.append("step/start", {"turn": 1, "step": 1})
    return s


def with_tool_result(invariants: bool = True) -> dsh.Session:
    """in_step + 3 assistant(c1), 4 tool/call c1, 5 tool/result c1; step still open."""
    s = in_step(invariants)
    s.append("assistant/message", assistant(calls=("c1",)), "append")
    s.append("tool/call", tool_call("c1"))
    s.append("tool/result", tool_result("c1"), "append", [4])
    return s


def state(s: dsh.Session) -> tuple[Any, ...]:
    """Everything observable about a session, for 'a rejected append leaves no trace'."""
    return (
        tuple(e.to_json() for e in s.events()),
        s.surface.nodes,
        s.surface.replace_generation,
        s.surface.content_generation,
        tuple(s.derive_messages()),
        s.transcript(),
    )
