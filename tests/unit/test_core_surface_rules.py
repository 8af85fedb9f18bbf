"""Contract §1/§3 surface rules: surfaceOp envelope, provenance, replace endpoints and
coverage, the node-0 rule, tool-result rewrites and generations. Invariants are off here so
each table isolates the structural layer; test_core_invariants covers the rest."""

from __future__ import annotations

from typing import Any

import pytest

import dsh

from .core_builders import assistant, new, state, system, tool_call, tool_result, user


def nodes(s: dsh.Session) -> tuple[int, ...]:
    return s.surface.nodes


def base() -> dsh.Session:
    """nodes [0 system, 1 user, 3 user, 4 assistant, 6 tool/result]; 2 and 5 are log-only."""
    s = new(invariants=False)
    s.append("system/message", system(), "append")
    s.append("user/message", user("u1"), "append")
    s.append("turn/start", {"turn": 1})
    s.append("user/message", user("u2"), "append")
    s.append("assistant/message", assistant(calls=("c1",)), "append")
    s.append("tool/call", tool_call("c1"))
    s.append("tool/result", tool_result("c1"), "append", [5])
    assert nodes(s) == (0, 1, 3, 4, 6)
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


@pytest.mark.parametrize(
    ("name", "type_", "data", "op", "sources"), ACCEPTED, ids=[a[0] for a in ACCEPTED]
)
def test_accepted(name: str, type_: str, data: Any, op: Any, sources: Any) -> None:
    s = base()
    ev = s.append(type_, data, op, sources)
    assert ev.seq == 7
    if sources is not None:
        assert ev.source_event_seqs == tuple(sources)


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
