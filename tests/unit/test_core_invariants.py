"""Contract §3 invariants: turns, steps, which events name the open turn/step, tool answers."""

from __future__ import annotations

from typing import Any

import pytest

import dsh

from .core_builders import assistant, in_step, new, state, system, tool_call, tool_result, user

Step = tuple[str, Any, Any, Any]  # type, data, surface op, sources


def run(steps: list[Step], invariants: bool = True) -> dsh.Session:
    s = new(invariants)
    for type_, data, op, sources in steps:
        s.append(type_, data, op, sources)
    return s


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


@pytest.mark.parametrize(("name", "prefix", "last", "code"), CASES, ids=[c[0] for c in CASES])
def test_invariant_matrix(name: str, prefix: list[Step], last: Step, code: str | None) -> None:
    s = run(prefix)
    before = state(s)
    if code is None:
        s.append(*last)
        return
    with pytest.raises(dsh.InvariantError) as info:
        s.append(*last)
    assert info.value.code == code, info.value
    assert state(s) == before
    # the bare layer accepts what only the invariants reject
    run([*prefix, last], invariants=False)


def _rewrite_session() -> dsh.Session:
    s = in_step()  # 0 turn/start, 1 user, 2 step/start
    s.append("tool/call", tool_call("c1"))
    s.append("tool/result", tool_result("c1"), "append", [3])  # seq 4
    s.append("step/end", {"turn": 1, "step": 1})
    return s


def test_tool_result_rewrite_needs_only_an_open_turn() -> None:
    s = _rewrite_session()
    s.append("tool/result", tool_result("c1", body="[pruned]"), dsh.Replace(4, 4), [4])
    assert s.surface.nodes == (1, 6)


def test_tool_result_rewrite_outside_a_turn_is_rejected() -> None:
    s = _rewrite_session()
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    with pytest.raises(dsh.InvariantError) as info:
        s.append("tool/result", tool_result("c1", body="x"), dsh.Replace(4, 4), [4])
    assert info.value.code == "NO_OPEN_TURN"


def test_system_replacement_names_the_open_step() -> None:
    s = in_step()
    s.append("system/message", system(), "append")  # seq 3
    with pytest.raises(dsh.InvariantError):
        s.append("system/message", system(step=2), dsh.Replace(3, 3), [3])
    s.append("system/message", system(mid="s2"), dsh.Replace(3, 3), [3])
