"""Contract §1/§3 surface rules: surfaceOp envelope, provenance, replace endpoints and
coverage, the node-0 rule, tool-result rewrites and generations. Invariants are off here so
each table isolates the structural layer; test_core_invariants covers the rest."""

from __future__ import annotations

from typing import Any

import pytest

import dsh
from tests.support.builders import new, state, tool_result, user
from tests.support.tables import ACCEPTED, REJECTED, SYS2, R, U, base


def nodes(s: dsh.Session) -> tuple[int, ...]:
    return s.surface.nodes


@pytest.mark.parametrize(
    ("name", "type_", "data", "op", "sources"), ACCEPTED, ids=[a[0] for a in ACCEPTED]
)
def test_accepted(name: str, type_: str, data: Any, op: Any, sources: Any) -> None:
    s = base()
    ev = s.append(type_, data, op, sources)
    assert ev.seq == 7
    if sources is not None:
        assert ev.source_event_seqs == tuple(sources)


@pytest.mark.parametrize(
    ("name", "type_", "data", "op", "sources", "cls", "code"),
    REJECTED,
    ids=[r[0] for r in REJECTED],
)
def test_rejected_leaves_no_trace(
    name: str, type_: str, data: Any, op: Any, sources: Any, cls: type[dsh.SessionError], code: str
) -> None:
    s = base()
    before = state(s)
    with pytest.raises(cls) as info:
        s.append(type_, data, op, sources)
    assert info.value.code == code, info.value
    assert state(s) == before
    assert s.append("user/message", user("after"), "append").seq == 7  # no seq was burned


def test_messages_name_seq_and_missing_nodes() -> None:
    s = base()
    with pytest.raises(
        dsh.ProvenanceError,
        match="sourceEventSeqs must include every shadowed surface node; missing 3, 4",
    ):
        s.append("user/message", U, R(1, 4), [1])
    with pytest.raises(
        dsh.SurfaceError, match=r"start seq 4 \(index 3\) is after end seq 1 \(index 1\)"
    ):
        s.append("user/message", U, R(4, 1), [1, 3, 4])


def test_replace_takes_the_range_place_and_shadowed_events_stay_logged() -> None:
    s = base()
    ev = s.append("user/message", U, R(1, 4), [1, 3, 4])
    assert nodes(s) == (0, 7, 6)
    assert len(s) == 8 and s.event(3).data["id"] == "u2"
    with pytest.raises(dsh.SurfaceError, match="start seq 3 not found"):
        s.append("user/message", U, R(3, 3), [3])
    # the replacement is itself a node and can be replaced again
    s.append("user/message", U, R(ev.seq, 6), [7, 6])
    assert nodes(s) == (0, 8)


def test_later_system_nodes_have_no_protection() -> None:
    s = base()
    s.append("system/message", SYS2, "append")  # seq 7, a later system node
    s.append("user/message", U, R(6, 7), [6, 7])
    assert nodes(s) == (0, 1, 3, 4, 8)


def test_node0_rule_only_applies_when_node0_is_system() -> None:
    s = new(invariants=False)
    s.append("user/message", user("a"), "append")
    s.append("user/message", user("b"), "append")
    s.append("user/message", U, R(0, 1), [0, 1])
    assert nodes(s) == (2,)


def test_generations() -> None:
    s = base()
    assert (s.surface.replace_generation, s.surface.content_generation) == (0, 0)
    s.append("user/message", U, "append")
    assert (s.surface.replace_generation, s.surface.content_generation) == (0, 0)
    s.append("user/message", U, R(1, 1), [1])
    assert (s.surface.replace_generation, s.surface.content_generation) == (1, 1)
    s.append("tool/result", tool_result("c1", body="x"), R(6, 6), [6])
    assert (s.surface.replace_generation, s.surface.content_generation) == (2, 2)


def test_replace_keeps_positions_consistent_for_later_lookups() -> None:
    s = new(invariants=False)
    for i in range(10):
        s.append("user/message", user(f"m{i}"), "append")
    s.append("user/message", U, R(2, 5), [2, 3, 4, 5])
    assert nodes(s) == (0, 1, 10, 6, 7, 8, 9)
    s.append("user/message", U, R(7, 9), [7, 8, 9])
    assert nodes(s) == (0, 1, 10, 6, 11)
    with pytest.raises(dsh.SurfaceError) as info:
        s.append("user/message", U, R(11, 10), [10, 6, 11])
    assert info.value.code == "REPLACE_REVERSED"
