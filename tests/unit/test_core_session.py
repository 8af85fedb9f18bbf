"""Session API: clock, reads, listeners, reentrancy, derive cache and transcript."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import dsh
from tests.support.builders import assistant, in_step, new, system, tool_result, user


def test_seq_and_time_clamped_to_never_go_back() -> None:
    times = iter([100, 50, 200, 199.7])  # a float clock is truncated to int ms
    s = dsh.Session.create("t", clock=lambda: next(times), invariants=False)  # type: ignore[arg-type, return-value]
    evs = [s.append("user/message", user(str(i)), "append") for i in range(4)]
    assert [e.seq for e in evs] == [0, 1, 2, 3]
    assert [e.time for e in evs] == [100, 100, 200, 200]
    assert all(type(e.time) is int for e in evs)


def test_default_clock_is_epoch_ms() -> None:
    ev = dsh.Session.create("t").append("turn/start", {"turn": 1})
    assert ev.time > 1_600_000_000_000


def test_reads() -> None:
    s = in_step()
    assert len(s) == 3
    assert s.event(1).type == "user/message"
    assert [e.seq for e in s.events()] == [0, 1, 2]
    assert [e.seq for e in s.events(1)] == [1, 2]
    assert [e.seq for e in s.events(0, 2)] == [0, 1]
    for bad in (-1, 3, "1"):
        with pytest.raises(IndexError):
            s.event(bad)  # type: ignore[arg-type]


def test_caller_data_is_copied_and_event_data_reusable() -> None:
    s = new(invariants=False)
    data = user("a")
    ev = s.append("user/message", data, "append")
    data["content"].append({"type": "text", "text": "later"})
    assert len(ev.data["content"]) == 1
    again = s.append("user/message", ev.data, "append")  # data taken from another event
    assert again.data == ev.data
    with pytest.raises(TypeError):
        ev.data["content"][0]["text"] = "changed"


def test_listeners_run_after_commit_and_failures_are_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = new()
    seen: list[tuple[int, int]] = []

    def good(ev: dsh.Event) -> None:
        seen.append((ev.seq, len(s)))  # committed before notification

    def bad(ev: dsh.Event) -> None:
        raise RuntimeError("listener bug")

    unsub_bad = s.subscribe(bad)
    unsub = s.subscribe(good)
    with caplog.at_level(logging.ERROR, logger="dsh.session"):
        s.append("turn/start", {"turn": 1})
    assert seen == [(0, 1)]
    assert "listener failed" in caplog.text
    unsub()
    unsub()  # idempotent
    unsub_bad()
    s.append("user/message", user(), "append")
    assert seen == [(0, 1)]


def test_rejected_append_notifies_nobody() -> None:
    s = new()
    seen: list[dsh.Event] = []
    s.subscribe(seen.append)
    with pytest.raises(dsh.InvariantError):
        s.append("step/start", {"turn": 1, "step": 1})
    assert seen == []


def test_append_from_a_listener_is_reentrant() -> None:
    s = new()
    errors: list[dsh.ReentrantAppendError] = []

    def reenter(ev: dsh.Event) -> None:
        try:
            s.append("user/message", user(), "append")
        except dsh.ReentrantAppendError as exc:
            errors.append(exc)
            raise

    s.subscribe(reenter)
    s.append("turn/start", {"turn": 1})
    assert len(errors) == 1 and errors[0].code == "REENTRANT_APPEND"
    assert isinstance(errors[0], dsh.ValidationError)
    assert len(s) == 1


def test_derive_messages_fresh_list_shared_immutable_messages() -> None:
    s = in_step()
    first = s.derive_messages()
    second = s.derive_messages()
    assert first == second and first is not second
    assert first[0] is second[0]
    first.append({"junk": 1})
    assert len(s.derive_messages()) == 1
    with pytest.raises(TypeError):
        second[0]["id"] = "x"  # type: ignore[index]


def test_derive_follows_appends_and_replaces() -> None:
    s = in_step()
    s.append("system/message", system(), "append")  # 3
    s.append("assistant/message", assistant(), "append")  # 4
    assert [m["id"] for m in s.derive_messages()] == ["u", "sys", "a"]
    s.append("user/message", user("sum"), dsh.Replace(1, 3), [1, 3])
    assert [m["id"] for m in s.derive_messages()] == ["sum", "a"]
    s.append("user/message", user("next"), "append")
    assert [m["id"] for m in s.derive_messages()] == ["sum", "a", "next"]


def test_transcript_is_append_origin_surface_events() -> None:
    s = in_step()
    s.append("user/message", user("sum"), dsh.Replace(1, 1), [1])
    s.append("assistant/message", assistant(), "append")
    assert [e.seq for e in s.transcript()] == [1, 4]
    assert [dsh.is_append_surface_event(e) for e in s.events()] == [False, True, False, False, True]


def test_is_append_surface_event_ignores_unknown_types() -> None:
    ev = dsh.Event("vendor/x", 0, 0, {}, "append", None, True)
    assert not dsh.is_append_surface_event(ev)


def test_tool_result_rewrite_updates_messages_not_transcript() -> None:
    s = in_step()
    s.append("assistant/message", assistant(calls=("c1",)), "append")  # 3
    s.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"})
    s.append("tool/result", tool_result("c1"), "append", [4])  # 5
    s.append("tool/result", tool_result("c1", body="[pruned]"), dsh.Replace(5, 5), [5])
    msgs = s.derive_messages()
    assert msgs[-1]["content"][0]["content"] == [{"type": "text", "text": "[pruned]"}]
    assert [e.seq for e in s.transcript()] == [1, 3, 5]


def test_surface_nodes_is_a_tuple_snapshot() -> None:
    s = in_step()
    nodes = s.surface.nodes
    s.append("user/message", user("b"), "append")
    assert nodes == (1,) and s.surface.nodes == (1, 3)


def test_create_requires_an_id() -> None:
    with pytest.raises(ValueError):
        dsh.Session.create("")


def test_public_names() -> None:
    assert dsh.SESSION_FORMAT_VERSION == 3
    names: dict[str, Any] = {n: getattr(dsh, n) for n in dsh.__all__}
    assert issubclass(names["SurfaceError"], dsh.ValidationError)
    assert issubclass(names["ReentrantAppendError"], dsh.ValidationError)
    assert all(issubclass(names[n], dsh.SessionError) for n in dsh.__all__ if n.endswith("Error"))
    assert hasattr(dsh.formats, "read_jsonl")
