"""Contract §2: known types, data shapes, unknown and ignorable events."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import dsh

from .core_builders import assistant, new, state, system, tool_call, tool_result, user


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


@pytest.mark.parametrize(("name", "type_", "data", "code"), BAD, ids=[b[0] for b in BAD])
def test_bad_data_is_rejected(name: str, type_: str, data: Any, code: str) -> None:
    s = new(invariants=False)
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("tool/call", tool_call("c1"))
    before = state(s)
    op = "append" if type_.endswith("message") or type_ == "tool/result" else None
    with pytest.raises(dsh.ValidationError) as info:
        s.append(type_, data, op)
    assert info.value.code == code, info.value
    assert state(s) == before


def test_interrupted_message_with_its_delivered_prefix() -> None:
    s = new(invariants=False)
    s.append("assistant/message", {**assistant(body="partial"), "interrupted": True}, "append")


def test_extra_fields_are_tolerated() -> None:
    s = new(invariants=False)
    s.append("turn/start", {"turn": 1, "nested": {"ok": [1, "two", None, True]}})
    s.append("user/message", {**user(), "meta": 1}, "append")
    s.append(
        "request/header",
        {"header": {"config": {}, "tools": [{"n": 1}]}, "reason": "r", "startsSeries": True},
    )


def test_empty_system_and_assistant_project_to_nothing_but_stay_nodes() -> None:
    s = new(invariants=False)
    s.append("system/message", system(body=""), "append")
    s.append("user/message", user(), "append")
    s.append("assistant/message", assistant(body=""), "append")
    s.append("user/message", user("u-empty", body=""), "append")
    assert s.surface.nodes == (0, 1, 2, 3)
    assert [m["id"] for m in s.derive_messages()] == ["u", "u-empty"]


def test_unknown_type_needs_ignorable() -> None:
    s = new()
    with pytest.raises(dsh.ValidationError) as info:
        s.append("vendor/thing", {"x": 1})
    assert info.value.code == "UNKNOWN_TYPE" and len(s) == 0


def test_ignorable_unknown_skips_checks_and_keeps_opaque_metadata() -> None:
    s = new()
    op = {"op": "replace", "startSeq": 40, "endSeq": 2}
    ev = s.append("vendor/thing", {"x": 1}, op, [99, 98], ignorable=True)
    assert ev.ignorable and ev.to_json()["surfaceOp"] == op and ev.source_event_seqs == (99, 98)
    weird = s.append("vendor/thing", [], "sideways", None, ignorable=True)
    assert weird.surface_op == "sideways"
    assert s.surface.nodes == () and s.surface.replace_generation == 0
    assert s.derive_messages() == [] and s.transcript() == ()
    restored = dsh.Session.from_restore("r", s.events())
    assert [e.to_json() for e in restored.events()][:2] == [e.to_json() for e in s.events()]


def test_ignorable_known_type_is_still_checked() -> None:
    s = new(invariants=False)
    with pytest.raises(dsh.ValidationError):
        s.append("turn/start", {"turn": "x"}, ignorable=True)
    assert s.append("turn/start", {"turn": 1}, ignorable=True).ignorable


@pytest.mark.parametrize("bad", ["", "noslash", "a/b/c", "/x", "x/", "a b/c", 5, None])
def test_type_names(bad: Any) -> None:
    with pytest.raises(dsh.ValidationError) as info:
        new().append(bad, {})
    assert info.value.code == "INVALID_TYPE"


def test_ignorable_must_be_bool() -> None:
    with pytest.raises(dsh.ValidationError) as info:
        new().append("vendor/x", {}, ignorable=1)  # type: ignore[arg-type]
    assert info.value.code == "INVALID_IGNORABLE"
