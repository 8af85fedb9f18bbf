"""Contract §2: known types, data shapes, unknown and ignorable events."""

from __future__ import annotations

from typing import Any

import pytest

import dsh
from tests.support.builders import assistant, new, state, system, user
from tests.support.tables import BAD, VOCABULARY_BASE


@pytest.mark.parametrize(("name", "type_", "data", "code"), BAD, ids=[b[0] for b in BAD])
def test_bad_data_is_rejected(name: str, type_: str, data: Any, code: str) -> None:
    s = new(invariants=False)
    for step in VOCABULARY_BASE:
        s.append(*step)
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
