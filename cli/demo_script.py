"""The scripted agent session `dsh demo` drives: pure data and the order of appends, no I/O.

An agent that debugs a failing CI build over twelve turns: streamed answers, a model attempt
that fails and is retried, tool calls and results, a screenshot whose image is offloaded
(``image/offload``), an oversized tool result rewritten to a trimmed one, and a compaction that
replaces turns 1-10 with one summary citing every message it hides. The script only calls an
``append`` function, so the same script runs against the in-process core (tests) and against
the pipeline through ``SessionClient`` (the demo). Every value is fixed: two runs differ only
in session id and times.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dsh

MODEL = {"kind": "model", "provider": "demo", "model": "scripted-1"}
SYSTEM_PROMPT = "You are a careful coding agent. Use tools to look before you answer."
OFFLOAD_REF = "blob://demo/ci-dashboard.png"
# A 1x1 PNG: the log keeps the pixels, the offload takes them off the model's surface.
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)


@dataclass(frozen=True)
class Tool:
    name: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str
    tool: Tool | None = None


TURNS: tuple[Turn, ...] = (
    Turn(
        "CI for payments-service has been red since this morning. Can you find out why?",
        "The failing job is `test-integration`: `test_refund_rounding` expects 10.01 but gets "
        "10.00.",
        Tool("ci_logs", {"job": "test-integration"}, "FAILED test_refund_rounding: 10.00 != 10.01"),
    ),
    Turn(
        "What changed since yesterday?",
        "One dependency bump: `moneyfmt` 2.3.1 -> 2.4.0, merged at 07:12.",
        Tool("git_log", {"since": "yesterday"}, "a1f3e2c bump moneyfmt to 2.4.0 (renovate)"),
    ),
    Turn(
        "Does 2.4.0 change rounding?",
        "Yes: its changelog says the default rounding moved from HALF_UP to HALF_EVEN.",
        Tool("web_fetch", {"url": "moneyfmt changelog"}, "2.4.0: default rounding is HALF_EVEN"),
    ),
    Turn(
        "Where do we round refunds?",
        "In `refunds/amounts.py`, `to_display()` calls `moneyfmt.format()` without a mode.",
        Tool("grep", {"pattern": "moneyfmt.format"}, "refunds/amounts.py:42: moneyfmt.format(v)"),
    ),
    Turn(
        "Are other call sites affected?",
        "Two more: invoices and the ledger export. Both pass an explicit mode, so they are fine.",
        Tool("grep", {"pattern": "rounding="}, "invoices.py:88 rounding=HALF_UP\nledger.py:17"),
    ),
    Turn(
        "What does finance expect for refunds?",
        "HALF_UP, per the refunds spec, section 3.2.",
    ),
    Turn(
        "Then pass HALF_UP explicitly in to_display().",
        "Done: `moneyfmt.format(v, rounding=HALF_UP)` in refunds/amounts.py.",
        Tool("edit_file", {"path": "refunds/amounts.py", "line": 42}, "1 line changed"),
    ),
    Turn(
        "Run the refund tests.",
        "All 37 refund tests pass, including test_refund_rounding.",
        Tool("run_tests", {"path": "tests/refunds"}, "37 passed in 4.1s"),
    ),
    Turn(
        "Add a regression test for the half-cent case.",
        "Added `test_refund_half_cent_rounds_up` (10.005 -> 10.01); it passes.",
        Tool("edit_file", {"path": "tests/refunds/test_rounding.py"}, "12 lines added"),
    ),
    Turn(
        "Open a pull request.",
        "PR #481 'refunds: explicit HALF_UP rounding (moneyfmt 2.4.0)' is open.",
        Tool("open_pr", {"title": "refunds: explicit HALF_UP rounding"}, "#481 opened"),
    ),
    Turn(
        "Here is the CI dashboard now. Is everything green?",
        "All green except `deploy-preview`, which timed out fetching images; a rerun passed.",
        Tool(
            "ci_logs", {"job": "deploy-preview"}, "\n".join(f"pull layer {i}/40" for i in range(40))
        ),
    ),
    Turn(
        "Summarise the state of the fix for the channel.",
        "moneyfmt 2.4.0 changed default rounding; refunds now pass HALF_UP explicitly, with a "
        "regression test. PR #481 is green and ready for review.",
    ),
)
COMPACTED_TURNS = 10  # turns 1..10 become one summary before turn 12's request
IMAGE_TURN = 11
SUMMARY = (
    "Summary of turns 1-10: CI failed because moneyfmt 2.4.0 switched its default rounding "
    "to HALF_EVEN; refunds/amounts.py now passes HALF_UP explicitly, a half-cent regression "
    "test was added, all refund tests pass, and PR #481 is open."
)
FORK_QUESTION = "Alternative: what if we pin moneyfmt to 2.3.1 instead?"
FORK_ANSWER = "Pinning works short-term, but we would miss 2.4.x fixes; the explicit mode is safer."

# append(type, data, surface_op, source_event_seqs) -> the committed event
Append = Callable[[str, Any, Any, Any], dsh.Event]


@dataclass
class Result:
    """What the script did, by seq: the demo prints and checks the projections against it."""

    last_seq: int = -1
    turn: int = 0
    nodes: list[int] = field(default_factory=list)  # the surface, tracked as the core does
    turn_nodes: dict[int, list[int]] = field(default_factory=dict)  # turn -> its surface nodes
    summary_seq: int = -1
    summarized: list[int] = field(default_factory=list)
    failed_attempt_seq: int = -1
    image_seq: int = -1
    offload_seq: int = -1
    rewritten_result_seq: int = -1
    rewrite_seq: int = -1


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def stream(body: str, kind: str = "text", start_ms: int = 0) -> list[dict[str, Any]]:
    """Timed deltas of a few words each, as a streaming model delivers them."""
    words = body.split(" ")
    chunks = [" ".join(words[i : i + 4]) + " " for i in range(0, len(words), 4)]
    chunks[-1] = chunks[-1].rstrip(" ")
    return [{"t": start_ms + 40 * i, "kind": kind, "text": c} for i, c in enumerate(chunks)]


def run_script(append: Append, turns: tuple[Turn, ...] = TURNS) -> Result:
    r = Result()

    def emit(type_: str, data: Any, op: Any = None, sources: Any = None) -> dsh.Event:
        ev = append(type_, data, op, sources)
        r.last_seq = ev.seq
        if op == "append":
            r.nodes.append(ev.seq)
            r.turn_nodes.setdefault(r.turn, []).append(ev.seq)
        elif isinstance(op, dsh.Replace):
            i, j = r.nodes.index(op.start_seq), r.nodes.index(op.end_seq)
            r.nodes[i : j + 1] = [ev.seq]
        return ev

    for turn, spec in enumerate(turns, 1):
        r.turn = turn
        emit("turn/start", {"turn": turn})
        emit("step/start", {"turn": turn, "step": 1})
        if turn == 1:
            emit(
                "system/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": {
                        "id": "system-prompt",
                        "role": "system",
                        "content": [text(SYSTEM_PROMPT)],
                        "source": {"kind": "plugin", "plugin": "system-prompt"},
                    },
                },
                "append",
            )
        if turn == len(turns) and len(turns) > COMPACTED_TURNS:
            _compact(emit, r)
        content = [text(spec.question)]
        if turn == IMAGE_TURN:
            content.append({"type": "image", "mediaType": "image/png", "data": PNG_1X1})
        question = emit(
            "user/message",
            {"id": f"u{turn}", "role": "user", "content": content, "source": {"kind": "user"}},
            "append",
        )
        if turn == 1:
            emit("request/header", {"header": {"config": {"temperature": 0}}, "reason": "initial"})
            emit(
                "request/context",
                {"provider": "demo", "model": "scripted-1", "contextWindow": 8000},
            )
            # The provider dropped the connection mid-stream: the partial output is logged as
            # an attempt (never on the surface) and the request is retried.
            failed = emit(
                "assistant/attempt",
                {
                    "turn": 1,
                    "step": 1,
                    "stream": stream("Let me look at the CI")[:1],
                    "error": {"code": "PROVIDER_OVERLOADED", "retryInMs": 250},
                },
            )
            r.failed_attempt_seq = failed.seq
        if turn == IMAGE_TURN:
            offload = emit("image/offload", {"seqs": [question.seq], "ref": OFFLOAD_REF})
            r.image_seq, r.offload_seq = question.seq, offload.seq
        step = 1
        if spec.tool is not None:
            step = _tool_step(emit, r, turn, spec.tool)
        emit(
            "assistant/message",
            {
                "turn": turn,
                "step": step,
                "message": {
                    "id": f"a{turn}",
                    "role": "assistant",
                    "content": [text(spec.answer)],
                    "source": MODEL,
                },
                "stream": stream(spec.answer),
                "usage": {"inputTokens": 900 + 150 * turn, "outputTokens": len(spec.answer) // 4},
            },
            "append",
        )
        emit("step/end", {"turn": turn, "step": step})
        emit("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return r


def _tool_step(emit: Callable[..., dsh.Event], r: Result, turn: int, tool: Tool) -> int:
    """Step 1 asks for the tool and gets its result; returns the step the answer goes in."""
    call_id = f"call-{turn}-{tool.name}"
    arguments = json.dumps(tool.arguments, sort_keys=True)
    emit(
        "assistant/message",
        {
            "turn": turn,
            "step": 1,
            "message": {
                "id": f"a{turn}-tool",
                "role": "assistant",
                "content": [
                    text(f"Checking with {tool.name}."),
                    {"type": "tool-call", "id": call_id, "name": tool.name, "arguments": arguments},
                ],
                "source": MODEL,
            },
            "stream": [
                *stream(f"Checking with {tool.name}."),
                {"t": 200, "kind": "tool-call", "id": call_id, "name": tool.name},
                {"t": 240, "kind": "tool-call", "id": call_id, "argumentsDelta": arguments},
            ],
        },
        "append",
    )
    call = emit(
        "tool/call",
        {"turn": turn, "step": 1, "callId": call_id, "name": tool.name, "arguments": arguments},
    )
    result = emit("tool/result", _tool_result(turn, call_id, tool.result), "append", [call.seq])
    lines = tool.result.splitlines()
    if len(lines) > 10:
        # Too long to keep paying for on every request: the same result, trimmed. A tool/result
        # replacement may change only the content of its result block, and cites the original.
        trimmed = "\n".join([f"[{len(lines) - 2} of {len(lines)} lines trimmed]", *lines[-2:]])
        rewrite = emit(
            "tool/result",
            _tool_result(turn, call_id, trimmed),
            dsh.Replace(result.seq, result.seq),
            [result.seq],
        )
        r.rewritten_result_seq, r.rewrite_seq = result.seq, rewrite.seq
    emit("step/end", {"turn": turn, "step": 1})
    emit("step/start", {"turn": turn, "step": 2})
    return 2


def _tool_result(turn: int, call_id: str, body: str) -> dict[str, Any]:
    block = {
        "type": "tool-result",
        "toolCallId": call_id,
        "content": [text(body)],
        "isError": False,
    }
    message = {
        "id": f"r-{call_id}",
        "role": "user",
        "content": [block],
        "source": {"kind": "tool", "callId": call_id},
    }
    return {"turn": turn, "step": 1, "message": message}


def _compact(emit: Callable[..., dsh.Event], r: Result) -> None:
    """Turns 1..COMPACTED_TURNS (all but the system prompt, node 0) become one summary."""
    first = r.turn_nodes[1][1]  # turn 1's node 0 is the system prompt: it stays
    last = r.turn_nodes[COMPACTED_TURNS][-1]
    hidden = r.nodes[r.nodes.index(first) : r.nodes.index(last) + 1]
    emit("compaction/start", {"reason": "context window", "turns": [1, COMPACTED_TURNS]})
    summary = emit(
        "user/message",
        {
            "id": "summary-1-10",
            "role": "user",
            "content": [text(SUMMARY)],
            "source": {"kind": "plugin", "plugin": "compaction"},
        },
        dsh.Replace(first, last),
        hidden,
    )
    emit("compaction/end", {"summary": summary.seq, "replaced": len(hidden)})
    r.summary_seq, r.summarized = summary.seq, hidden


def fork_turn(append: Append, turn: int) -> int:
    """The fork's own turn after the inherited log; returns its last seq."""
    append("turn/start", {"turn": turn}, None, None)
    append(
        "user/message",
        {
            "id": "fork-q",
            "role": "user",
            "content": [text(FORK_QUESTION)],
            "source": {"kind": "user"},
        },
        "append",
        None,
    )
    append("step/start", {"turn": turn, "step": 1}, None, None)
    data = {
        "turn": turn,
        "step": 1,
        "message": {
            "id": "fork-a",
            "role": "assistant",
            "content": [text(FORK_ANSWER)],
            "source": MODEL,
        },
        "stream": stream(FORK_ANSWER),
    }
    append("assistant/message", data, "append", None)
    append("step/end", {"turn": turn, "step": 1}, None, None)
    return append("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None, None).seq
