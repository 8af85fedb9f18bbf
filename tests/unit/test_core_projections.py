"""Message projections: registration, image/offload, decisions, generations, removal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import dsh
from tests.support.builders import in_step, new, state, user

IMG = {"type": "image", "mediaType": "image/png", "data": "AAAA"}


def offload(ev: dsh.Event, ctx: Any) -> Mapping[int, Any]:
    """Replace every image block of the named nodes with a text reference."""
    out = {}
    for seq in ev.data["seqs"]:
        m = ctx.messages[seq]
        content = [
            {"type": "text", "text": f"[image {ev.data['ref']}]"} if b["type"] == "image" else b
            for b in m["content"]
        ]
        out[seq] = {**m, "content": content}
    return out


def with_image() -> dsh.Session:
    s = in_step()  # user message at seq 1
    s.append("user/message", {**user("img"), "content": [IMG]}, "append")  # seq 3
    return s


def test_image_offload_is_rejected_until_registered() -> None:
    s = with_image()
    before = state(s)
    with pytest.raises(dsh.ProjectionError) as info:
        s.append("image/offload", {"seqs": [3], "ref": "blob-1"})
    assert info.value.code == "PROJECTION_INTERPRETER_MISSING"
    assert state(s) == before


def test_projection_rewrites_messages_and_bumps_content_generation_only() -> None:
    s = with_image()
    s.register_message_projection("image/offload", offload)
    nodes = s.surface.nodes
    s.append("image/offload", {"seqs": [3], "ref": "blob-1"})
    assert s.surface.nodes == nodes
    assert (s.surface.replace_generation, s.surface.content_generation) == (0, 1)
    assert s.derive_messages()[-1]["content"] == [{"type": "text", "text": "[image blob-1]"}]
    assert s.event(3).data["content"] == [IMG]  # the log is untouched
    assert [e.seq for e in s.transcript()] == [1, 3]


def test_ctx_exposes_current_nodes_and_messages() -> None:
    s = with_image()
    seen: dict[str, Any] = {}

    def spy(ev: dsh.Event, ctx: Any) -> Mapping[int, Any]:
        seen["nodes"] = ctx.nodes
        seen["messages"] = dict(ctx.messages)
        seen["missing"] = 0 in ctx.messages
        return {}

    s.register_message_projection("vendor/spy", spy)
    s.append("vendor/spy", {})
    assert seen["nodes"] == (1, 3)
    assert set(seen["messages"]) == {1, 3} and seen["messages"][1]["id"] == "u"
    assert seen["missing"] is False


def _returns(value: Any) -> Any:
    return lambda ev, ctx: value


def _raises(ev: dsh.Event, ctx: Any) -> Mapping[int, Any]:
    raise KeyError("boom")


@pytest.mark.parametrize(
    ("interpreter", "code"),
    [
        (_returns({0: user()}), "PROJECTION_NOT_A_NODE"),  # a log event, not a node
        (_returns({99: user()}), "PROJECTION_NOT_A_NODE"),
        (_returns({"1": user()}), "PROJECTION_NOT_A_NODE"),
        (_returns({1: {"id": "x"}}), "PROJECTION_INVALID"),
        (
            _returns({1: {**user(), "content": [{"type": "text", "text": float("nan")}]}}),
            "PROJECTION_INVALID",
        ),
        (_returns([1]), "PROJECTION_INVALID"),
        (_raises, "PROJECTION_FAILED"),
    ],
)
def test_bad_decisions_reject_the_event(interpreter: Any, code: str) -> None:
    s = with_image()
    s.register_message_projection("image/offload", interpreter)
    before = state(s)
    with pytest.raises(dsh.ProjectionError) as info:
        s.append("image/offload", {"seqs": [3], "ref": "r"})
    assert info.value.code == code
    assert state(s) == before


def test_projection_events_carry_no_surface_metadata() -> None:
    s = with_image()
    s.register_message_projection("image/offload", offload)
    with pytest.raises(dsh.ProjectionError):
        s.append("image/offload", {"seqs": [3], "ref": "r"}, "append")


def test_core_types_cannot_be_projections() -> None:
    with pytest.raises(dsh.ProjectionError) as info:
        new().register_message_projection("user/message", offload)
    assert info.value.code == "PROJECTION_TYPE_RESERVED"


def test_a_type_logged_as_opaque_cannot_become_a_projection() -> None:
    s = new()
    s.append("vendor/offload", {}, ignorable=True)
    with pytest.raises(dsh.ProjectionError) as info:
        s.register_message_projection("vendor/offload", offload)
    assert info.value.code == "PROJECTION_TYPE_ALREADY_LOGGED"


def test_interpreter_cannot_append() -> None:
    s = with_image()

    def sneaky(ev: dsh.Event, ctx: Any) -> Mapping[int, Any]:
        s.append("user/message", user(), "append")
        return {}

    s.register_message_projection("vendor/sneaky", sneaky)
    with pytest.raises(dsh.ProjectionError) as info:
        s.append("vendor/sneaky", {})
    assert isinstance(info.value.__cause__, dsh.ReentrantAppendError)
    assert len(s) == 4


def test_removed_interpreter_breaks_reads_and_appends_until_restored() -> None:
    s = with_image()
    remove = s.register_message_projection("image/offload", offload)
    remove()  # removing an unused interpreter is harmless
    assert s.derive_messages()
    remove = s.register_message_projection("image/offload", offload)
    s.append("image/offload", {"seqs": [3], "ref": "r"})
    remove()
    reads = [
        s.derive_messages,
        s.transcript,
        s.events,
        lambda: s.event(0),
        lambda: s.surface,
        lambda: s.fork("c"),
        lambda: s.append("user/message", user(), "append"),
    ]
    for read in reads:
        with pytest.raises(dsh.ProjectionError) as info:
            read()
        assert info.value.code == "PROJECTION_INTERPRETER_MISSING"
    s.register_message_projection("image/offload", offload)
    assert s.derive_messages()[-1]["content"][0]["type"] == "text"


def test_restore_needs_the_interpreter_and_reproduces_the_decision() -> None:
    s = with_image()
    s.register_message_projection("image/offload", offload)
    s.append("image/offload", {"seqs": [3], "ref": "r"})
    with pytest.raises(dsh.RestoreError) as info:
        dsh.Session.from_restore("r", s.events())
    assert info.value.index == 4 and info.value.code == "PROJECTION_INTERPRETER_MISSING"
    r = dsh.Session.from_restore("r", s.events(), projections={"image/offload": offload})
    assert r.derive_messages() == s.derive_messages()
    assert r.surface.content_generation == s.surface.content_generation
    s.append("step/end", {"turn": 1, "step": 1})
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    child = s.fork("child")  # inherits the parent's interpreters
    assert child.derive_messages() == s.derive_messages()


def test_replace_after_projection_uses_the_event_message_for_new_nodes() -> None:
    s = with_image()
    s.register_message_projection("image/offload", offload)
    s.append("image/offload", {"seqs": [3], "ref": "r"})
    s.append("user/message", user("sum"), dsh.Replace(1, 3), [1, 3])
    assert [m["id"] for m in s.derive_messages()] == ["sum"]
    assert s.surface.content_generation == 2
