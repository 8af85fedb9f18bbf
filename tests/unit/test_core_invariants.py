"""Contract §3 invariants: turns, steps, which events name the open turn/step, tool answers."""

from __future__ import annotations

import pytest

import dsh
from tests.support.builders import in_step, new, state, system, tool_call, tool_result
from tests.support.tables import CASES, Step


def run(steps: list[Step], invariants: bool = True) -> dsh.Session:
    s = new(invariants)
    for type_, data, op, sources in steps:
        s.append(type_, data, op, sources)
    return s


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
