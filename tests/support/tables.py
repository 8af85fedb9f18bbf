"""Tables of the core's rules: what each rejected input must fail with, and what is accepted.
The core's own unit tests (tests/unit/test_core_*.py) and the contract suite
(tests/contract/) run them, the latter against every backend."""

from __future__ import annotations

import copy
from typing import Any

import dsh
from tests.support.builders import assistant, new, system, tool_call, tool_result, user

Step = tuple[str, Any, Any, Any]  # type, data, surface op, sources

# -- surface rules (the bare layer: invariants off) ---------------------------------------

# nodes [0 system, 1 user, 3 user, 4 assistant, 6 tool/result]; 2 and 5 are log-only.
BASE: list[Step] = [
    ("system/message", system(), "append", None),
    ("user/message", user("u1"), "append", None),
    ("turn/start", {"turn": 1}, None, None),
    ("user/message", user("u2"), "append", None),
    ("assistant/message", assistant(calls=("c1",)), "append", None),
    ("tool/call", tool_call("c1"), None, None),
    ("tool/result", tool_result("c1"), "append", [5]),
]


def base() -> dsh.Session:
    s = new(invariants=False)
    for step in BASE:
        s.append(*step)
    assert s.surface.nodes == (0, 1, 3, 4, 6)
    return s


def R(a: int, b: int) -> dict[str, Any]:
    return {"op": "replace", "startSeq": a, "endSeq": b}


U = user("new", "summary", kind="plugin", plugin="compaction")
SYS2 = system(mid="sys-2", body="be verbose")

ACCEPTED: list[tuple[str, str, Any, Any, Any]] = [
    ("plain user append", "user/message", U, "append", None),
    ("user cites in caller order", "user/message", U, "append", [3, 1]),
    ("system cites", "system/message", SYS2, "append", [0]),
    ("tool/result cites its call", "tool/result", tool_result("c1"), "append", [5]),
    ("log-only plain", "turn/start", {"turn": 2}, None, None),
    ("replace range with full coverage", "user/message", U, R(1, 4), [1, 3, 4]),
    ("replace may cite more than the range", "user/message", U, R(3, 3), [3, 2]),
    ("replace via Replace object", "user/message", U, dsh.Replace(1, 1), [1]),
    ("node 0 swapped by a system prompt", "system/message", SYS2, R(0, 0), [0]),
    ("range not starting at node 0", "user/message", U, R(1, 6), [1, 3, 4, 6]),
    (
        "tool result content rewrite",
        "tool/result",
        tool_result("c1", body="[pruned]"),
        R(6, 6),
        [6],
    ),
]


def _rewrite(**changes: Any) -> dict[str, Any]:
    data = tool_result("c1", body="[pruned]")
    block = data["message"]["content"][0]
    for key, value in changes.items():
        if key in ("toolCallId", "isError"):
            block[key] = value
        elif key == "id":
            data["message"]["id"] = value
        elif key == "callId":
            data["message"]["source"]["callId"] = value
        else:
            data[key] = value
    return data


REJECTED: list[tuple[str, str, Any, Any, Any, type[dsh.SessionError], str]] = [
    # surfaceOp envelope
    (
        "surface type without op",
        "user/message",
        U,
        None,
        None,
        dsh.SurfaceError,
        "SURFACE_OP_REQUIRED",
    ),
    (
        "log type with op",
        "turn/start",
        {"turn": 2},
        "append",
        None,
        dsh.SurfaceError,
        "SURFACE_OP_FORBIDDEN",
    ),
    ("unknown op word", "user/message", U, "prepend", None, dsh.SurfaceError, "INVALID_SURFACE_OP"),
    (
        "replace missing endSeq",
        "user/message",
        U,
        {"op": "replace", "startSeq": 1},
        [1],
        dsh.SurfaceError,
        "INVALID_SURFACE_OP",
    ),
    (
        "replace extra key",
        "user/message",
        U,
        {**R(1, 1), "x": 1},
        [1],
        dsh.SurfaceError,
        "INVALID_SURFACE_OP",
    ),
    (
        "replace bool endpoint",
        "user/message",
        U,
        {"op": "replace", "startSeq": True, "endSeq": 1},
        [1],
        dsh.SurfaceError,
        "INVALID_SURFACE_OP",
    ),
    (
        "replace wrong op name",
        "user/message",
        U,
        {"op": "swap", "startSeq": 1, "endSeq": 1},
        [1],
        dsh.SurfaceError,
        "INVALID_SURFACE_OP",
    ),
    # provenance
    (
        "assistant cites",
        "assistant/message",
        assistant(),
        "append",
        [1],
        dsh.ProvenanceError,
        "SOURCES_NOT_ALLOWED",
    ),
    (
        "assistant cites even empty",
        "assistant/message",
        assistant(),
        "append",
        [],
        dsh.ProvenanceError,
        "SOURCES_NOT_ALLOWED",
    ),
    (
        "log type cites",
        "tool/call",
        tool_call("c2"),
        None,
        [4],
        dsh.ProvenanceError,
        "SOURCES_NOT_ALLOWED",
    ),
    ("empty sources", "user/message", U, "append", [], dsh.ProvenanceError, "SOURCES_EMPTY"),
    (
        "duplicate sources",
        "user/message",
        U,
        "append",
        [1, 3, 1],
        dsh.ProvenanceError,
        "SOURCES_DUPLICATE",
    ),
    (
        "negative source",
        "user/message",
        U,
        "append",
        [-1],
        dsh.ProvenanceError,
        "SOURCES_NOT_EARLIER",
    ),
    (
        "source not earlier",
        "user/message",
        U,
        "append",
        [7],
        dsh.ProvenanceError,
        "SOURCES_NOT_EARLIER",
    ),
    (
        "source in the future",
        "user/message",
        U,
        "append",
        [99],
        dsh.ProvenanceError,
        "SOURCES_NOT_EARLIER",
    ),
    ("string source", "user/message", U, "append", ["1"], dsh.ProvenanceError, "SOURCES_INVALID"),
    ("float source", "user/message", U, "append", [1.0], dsh.ProvenanceError, "SOURCES_INVALID"),
    ("bool source", "user/message", U, "append", [True], dsh.ProvenanceError, "SOURCES_INVALID"),
    (
        "NaN source",
        "user/message",
        U,
        "append",
        [float("nan")],
        dsh.ValidationError,
        "JSON_NOT_FINITE",
    ),
    # replace endpoints and coverage
    (
        "endpoint is the new event",
        "user/message",
        U,
        R(1, 7),
        [1],
        dsh.SurfaceError,
        "REPLACE_NOT_EARLIER",
    ),
    (
        "start is a log event",
        "user/message",
        U,
        R(2, 3),
        [2, 3],
        dsh.SurfaceError,
        "REPLACE_START_NOT_ON_SURFACE",
    ),
    (
        "end is a log event",
        "user/message",
        U,
        R(1, 5),
        [1, 3, 4],
        dsh.SurfaceError,
        "REPLACE_END_NOT_ON_SURFACE",
    ),
    (
        "negative start",
        "user/message",
        U,
        R(-1, 1),
        [1],
        dsh.SurfaceError,
        "REPLACE_START_NOT_ON_SURFACE",
    ),
    (
        "reversed by position",
        "user/message",
        U,
        R(4, 1),
        [1, 3, 4],
        dsh.SurfaceError,
        "REPLACE_REVERSED",
    ),
    (
        "coverage missing",
        "user/message",
        U,
        R(1, 4),
        [1, 4],
        dsh.ProvenanceError,
        "REPLACE_SOURCES_MISSING",
    ),
    (
        "replace without sources",
        "user/message",
        U,
        R(1, 1),
        None,
        dsh.ProvenanceError,
        "REPLACE_SOURCES_MISSING",
    ),
    (
        "assistant replace cannot cite",
        "assistant/message",
        assistant(),
        R(4, 4),
        None,
        dsh.ProvenanceError,
        "REPLACE_SOURCES_MISSING",
    ),
    # node-0 rule
    (
        "user over system node 0",
        "user/message",
        U,
        R(0, 0),
        [0],
        dsh.SurfaceError,
        "NODE0_REPLACEMENT_NOT_SYSTEM",
    ),
    (
        "user over range from node 0",
        "user/message",
        U,
        R(0, 3),
        [0, 1, 3],
        dsh.SurfaceError,
        "NODE0_REPLACEMENT_NOT_SYSTEM",
    ),
    (
        "system over wider range from 0",
        "system/message",
        SYS2,
        R(0, 1),
        [0, 1],
        dsh.SurfaceError,
        "NODE0_RANGE_TOO_WIDE",
    ),
    # tool-result rewrite
    (
        "rewrite spans two nodes",
        "tool/result",
        _rewrite(),
        R(4, 6),
        [4, 6],
        dsh.SurfaceError,
        "TOOL_REWRITE_NOT_SINGLE",
    ),
    (
        "rewrite targets a user message",
        "tool/result",
        _rewrite(),
        R(3, 3),
        [3],
        dsh.SurfaceError,
        "TOOL_REWRITE_TARGET",
    ),
    (
        "rewrite changes toolCallId",
        "tool/result",
        _rewrite(toolCallId="c9", callId="c9"),
        R(6, 6),
        [6],
        dsh.SurfaceError,
        "TOOL_REWRITE_CHANGED",
    ),
    (
        "rewrite changes isError",
        "tool/result",
        _rewrite(isError=True),
        R(6, 6),
        [6],
        dsh.SurfaceError,
        "TOOL_REWRITE_CHANGED",
    ),
    (
        "rewrite changes message id",
        "tool/result",
        _rewrite(id="other"),
        R(6, 6),
        [6],
        dsh.SurfaceError,
        "TOOL_REWRITE_CHANGED",
    ),
    (
        "rewrite adds meta",
        "tool/result",
        _rewrite(meta={"pruned": True}),
        R(6, 6),
        [6],
        dsh.SurfaceError,
        "TOOL_REWRITE_CHANGED",
    ),
    (
        "rewrite changes step",
        "tool/result",
        _rewrite(step=2),
        R(6, 6),
        [6],
        dsh.SurfaceError,
        "TOOL_REWRITE_CHANGED",
    ),
]


# -- invariants ------------------------------------------------------------------------------

TS1: Step = ("turn/start", {"turn": 1}, None, None)
SS1: Step = ("step/start", {"turn": 1, "step": 1}, None, None)
SE1: Step = ("step/end", {"turn": 1, "step": 1}, None, None)
TE1: Step = ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}, None, None)
CALL: Step = ("tool/call", tool_call("c1"), None, None)
NOT_STARTED = {"name": "X", "code": "TOOL_NOT_STARTED"}

# (name, prefix that must be accepted, last event, expected code or None when accepted)
CASES: list[tuple[str, list[Step], Step, str | None]] = [
    ("first turn is 1", [], TS1, None),
    ("first turn not 1", [], ("turn/start", {"turn": 2}, None, None), "TURN_NUMBER"),
    ("turns never nested", [TS1], ("turn/start", {"turn": 2}, None, None), "TURN_ALREADY_OPEN"),
    ("turns numbered on", [TS1, TE1], ("turn/start", {"turn": 2}, None, None), None),
    ("turn numbers do not repeat", [TS1, TE1], TS1, "TURN_NUMBER"),
    ("turn/end without turn", [], TE1, "NO_OPEN_TURN"),
    (
        "turn/end names the turn",
        [TS1],
        ("turn/end", {"turn": 2, "reason": {"kind": "completed"}}, None, None),
        "TURN_MISMATCH",
    ),
    ("turn/end with open step", [TS1, SS1], TE1, "STEP_STILL_OPEN"),
    ("step outside turn", [], SS1, "NO_OPEN_TURN"),
    ("first step is 1", [TS1], ("step/start", {"turn": 1, "step": 2}, None, None), "STEP_NUMBER"),
    (
        "steps not nested",
        [TS1, SS1],
        ("step/start", {"turn": 1, "step": 2}, None, None),
        "STEP_ALREADY_OPEN",
    ),
    (
        "steps numbered on",
        [TS1, SS1, SE1],
        ("step/start", {"turn": 1, "step": 2}, None, None),
        None,
    ),
    (
        "step names the turn",
        [TS1],
        ("step/start", {"turn": 3, "step": 1}, None, None),
        "TURN_MISMATCH",
    ),
    (
        "steps restart each turn",
        [TS1, SS1, SE1, TE1, ("turn/start", {"turn": 2}, None, None)],
        ("step/start", {"turn": 2, "step": 1}, None, None),
        None,
    ),
    ("step/end without step", [TS1], SE1, "NO_OPEN_STEP"),
    (
        "step/end names the step",
        [TS1, SS1],
        ("step/end", {"turn": 1, "step": 2}, None, None),
        "STEP_MISMATCH",
    ),
    ("system needs a step", [TS1], ("system/message", system(), "append", None), "NO_OPEN_STEP"),
    ("system in step", [TS1, SS1], ("system/message", system(), "append", None), None),
    (
        "system names the turn",
        [TS1, SS1],
        ("system/message", system(turn=2), "append", None),
        "TURN_MISMATCH",
    ),
    (
        "assistant needs a turn",
        [],
        ("assistant/message", assistant(), "append", None),
        "NO_OPEN_TURN",
    ),
    (
        "assistant names the step",
        [TS1, SS1],
        ("assistant/message", assistant(step=2), "append", None),
        "STEP_MISMATCH",
    ),
    (
        "attempt in step",
        [TS1, SS1],
        ("assistant/attempt", {"turn": 1, "step": 1, "stream": []}, None, None),
        None,
    ),
    (
        "attempt needs a step",
        [TS1],
        ("assistant/attempt", {"turn": 1, "step": 1, "stream": []}, None, None),
        "NO_OPEN_STEP",
    ),
    ("tool/call needs a step", [TS1], CALL, "NO_OPEN_STEP"),
    ("tool/call twice", [TS1, SS1, CALL], CALL, "TOOL_CALL_DUPLICATE"),
    (
        "result answers a call",
        [TS1, SS1, CALL],
        ("tool/result", tool_result("c1"), "append", [2]),
        None,
    ),
    (
        "result without a call",
        [TS1, SS1],
        ("tool/result", tool_result("c1"), "append", None),
        "TOOL_RESULT_UNMATCHED",
    ),
    (
        "result for another call",
        [TS1, SS1, CALL],
        ("tool/result", tool_result("c2"), "append", None),
        "TOOL_RESULT_UNMATCHED",
    ),
    (
        "result twice",
        [TS1, SS1, CALL, ("tool/result", tool_result("c1"), "append", None)],
        ("tool/result", tool_result("c1"), "append", None),
        "TOOL_RESULT_DUPLICATE",
    ),
    (
        "call of an earlier step",
        [TS1, SS1, CALL, SE1, ("step/start", {"turn": 1, "step": 2}, None, None)],
        ("tool/result", tool_result("c1", step=2), "append", None),
        "TOOL_RESULT_UNMATCHED",
    ),
    (
        "result names the step",
        [TS1, SS1, CALL],
        ("tool/result", tool_result("c1", step=2), "append", None),
        "STEP_MISMATCH",
    ),
    (
        "TOOL_NOT_STARTED needs no call",
        [TS1, SS1],
        ("tool/result", tool_result("c1", error=NOT_STARTED), "append", None),
        None,
    ),
    (
        "other error codes need a call",
        [TS1, SS1],
        ("tool/result", tool_result("c1", error={"name": "X", "code": "BOOM"}), "append", None),
        "TOOL_RESULT_UNMATCHED",
    ),
    (
        "request needs a turn",
        [],
        ("request/context", {"provider": "p", "model": "m"}, None, None),
        "NO_OPEN_TURN",
    ),
    (
        "request in turn",
        [TS1],
        ("request/context", {"provider": "p", "model": "m"}, None, None),
        None,
    ),
    (
        "header in turn",
        [TS1],
        ("request/header", {"header": {"config": {}}, "reason": "initial"}, None, None),
        None,
    ),
    (
        "header needs a turn",
        [],
        ("request/header", {"header": {"config": {}}, "reason": "initial"}, None, None),
        "NO_OPEN_TURN",
    ),
    ("user is unconstrained", [], ("user/message", user(), "append", None), None),
    ("end-seed is unconstrained", [TS1, SS1], ("session/end-seed", {}, None, None), None),
    ("plugin types unconstrained", [], ("compaction/start", {"any": "thing"}, None, None), None),
]


# -- vocabulary --------------------------------------------------------------------------------

# A turn with an open step and a tool call: what each bad datum is appended to.
VOCABULARY_BASE: list[Step] = [
    ("turn/start", {"turn": 1}, None, None),
    ("step/start", {"turn": 1, "step": 1}, None, None),
    ("tool/call", tool_call("c1"), None, None),
]


def _edit(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node: Any = data
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is _DEL:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


_DEL = object()
ERR = {"name": "E", "code": "BOOM"}

BAD: list[tuple[str, str, Any, str]] = [
    ("user role", "user/message", _edit(user(), "role", "assistant"), "INVALID_DATA"),
    ("user id", "user/message", _edit(user(), "id", 3), "INVALID_DATA"),
    ("user content not list", "user/message", _edit(user(), "content", "hi"), "INVALID_DATA"),
    ("unknown block", "user/message", _edit(user(), "content.0.type", "video"), "INVALID_DATA"),
    (
        "text block without text",
        "user/message",
        _edit(user(), "content.0.text", _DEL),
        "INVALID_DATA",
    ),
    ("unknown source", "user/message", _edit(user(), "source.kind", "alien"), "INVALID_DATA"),
    # Unhashable kinds (frozen objects and lists) are refused, not a TypeError from a lookup.
    ("source kind object", "user/message", _edit(user(), "source.kind", {}), "INVALID_DATA"),
    ("source kind list", "user/message", _edit(user(), "source.kind", ["user"]), "INVALID_DATA"),
    (
        "plugin source needs plugin",
        "user/message",
        _edit(user(), "source", {"kind": "plugin"}),
        "INVALID_DATA",
    ),
    (
        "image block fields",
        "user/message",
        _edit(user(), "content.0", {"type": "image", "data": "x"}),
        "INVALID_DATA",
    ),
    (
        "tool-call block fields",
        "user/message",
        _edit(user(), "content.0", {"type": "tool-call", "id": "c"}),
        "INVALID_DATA",
    ),
    ("data not an object", "user/message", ["x"], "INVALID_DATA"),
    ("system role", "system/message", _edit(system(), "message.role", "user"), "INVALID_DATA"),
    (
        "system needs plugin source",
        "system/message",
        _edit(system(), "message.source", {"kind": "user"}),
        "INVALID_DATA",
    ),
    ("system turn not int", "system/message", _edit(system(), "turn", "1"), "INVALID_DATA"),
    (
        "assistant role",
        "assistant/message",
        _edit(assistant(), "message.role", "user"),
        "INVALID_DATA",
    ),
    (
        "assistant needs model source",
        "assistant/message",
        _edit(assistant(), "message.source", {"kind": "user"}),
        "INVALID_DATA",
    ),
    ("assistant stream", "assistant/message", _edit(assistant(), "stream", _DEL), "INVALID_DATA"),
    (
        "assistant interrupted false",
        "assistant/message",
        _edit(assistant(), "interrupted", False),
        "INVALID_DATA",
    ),
    (
        "interrupted with tool calls",
        "assistant/message",
        {**assistant(calls=("c1",)), "interrupted": True},
        "INTERRUPTED_WITH_TOOL_CALLS",
    ),
    ("assistant step bool", "assistant/message", _edit(assistant(), "step", True), "INVALID_DATA"),
    (
        "result id mismatch",
        "tool/result",
        _edit(tool_result(), "message.content.0.toolCallId", "c9"),
        "TOOL_RESULT_CALL_ID_MISMATCH",
    ),
    (
        "result two blocks",
        "tool/result",
        _edit(tool_result(), "message.content", [tool_result()["message"]["content"][0]] * 2),
        "TOOL_RESULT_SHAPE",
    ),
    (
        "result text block",
        "tool/result",
        _edit(tool_result(), "message.content", [{"type": "text", "text": "x"}]),
        "TOOL_RESULT_SHAPE",
    ),
    (
        "result needs tool source",
        "tool/result",
        _edit(tool_result(), "message.source", {"kind": "user"}),
        "INVALID_DATA",
    ),
    (
        "error needs isError",
        "tool/result",
        {**tool_result(), "error": ERR},
        "TOOL_RESULT_ERROR_FLAG",
    ),
    ("error fields", "tool/result", _edit(tool_result(error=ERR), "error.code", 5), "INVALID_DATA"),
    ("turn/start turn 0", "turn/start", {"turn": 0}, "INVALID_DATA"),
    ("turn/end reason kind", "turn/end", {"turn": 1, "reason": {"kind": "bored"}}, "INVALID_DATA"),
    ("turn/end reason string", "turn/end", {"turn": 1, "reason": "completed"}, "INVALID_DATA"),
    ("turn/end reason kind list", "turn/end", {"turn": 1, "reason": {"kind": []}}, "INVALID_DATA"),
    (
        "turn/end reason kind object",
        "turn/end",
        {"turn": 1, "reason": {"kind": {}}},
        "INVALID_DATA",
    ),
    ("tool/call arguments", "tool/call", _edit(tool_call(), "arguments", {"x": 1}), "INVALID_DATA"),
    (
        "header.system",
        "request/header",
        {"header": {"config": {}, "system": "p"}, "reason": "r"},
        "INVALID_DATA",
    ),
    (
        "empty tools",
        "request/header",
        {"header": {"config": {}, "tools": []}, "reason": "r"},
        "INVALID_DATA",
    ),
    (
        "empty adapterDefaults",
        "request/header",
        {"header": {"config": {}, "adapterDefaults": {}}, "reason": "r"},
        "INVALID_DATA",
    ),
    ("header without config", "request/header", {"header": {}, "reason": "r"}, "INVALID_DATA"),
    (
        "context update value",
        "request/context",
        {"provider": "p", "model": "m", "systemPromptUpdate": "x"},
        "INVALID_DATA",
    ),
    ("end-seed inherited false", "session/end-seed", {"inherited": False}, "INVALID_DATA"),
]
