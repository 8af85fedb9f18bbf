"""The Agents SDK adapter's incremental state: the position a plan continues and the surface's
items read from its end agree, after every plan, with what a whole pass over the session gives
(the core's turn state, ``node_items``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

import dsh
from producers.agents_items import Planner, UnsupportedItemError, node_items
from producers.agents_position import Position
from producers.agents_surface import SurfaceItems

SOURCE = {"kind": "model", "provider": "openai", "model": "m"}


def call(n: int) -> dict[str, Any]:
    return {"type": "function_call", "call_id": f"c{n}", "name": "grep", "arguments": "{}"}


ROUNDS: list[list[dict[str, Any]]] = [
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    [{"id": "msg_1", "type": "message", "role": "assistant", "content": "hello"}],
    [{"role": "user", "content": [{"type": "input_text", "text": "grep it"}]}, call(1)],
    [{"type": "function_call_output", "call_id": "c1", "output": "found"}],
    [{"type": "reasoning", "summary": [{"text": "so"}]}, call(2)],
    [{"type": "function_call_output", "call_id": "c2", "output": "again"}],
    [{"role": "assistant", "content": "done"}, {"role": "developer", "content": "note"}],
    [{"role": "user", "content": "next"}, {"role": "assistant", "content": "ok"}],
]


def pop(s: dsh.Session, items: SurfaceItems, position: Position) -> Position:
    found = items.last_node(s)
    assert found is not None
    p = Planner(s, SOURCE, position)
    p.open_step()
    p.append(
        "system/message", p.system_data("pop", []), dsh.Replace(found[0], found[0]), [found[0]]
    )
    return p.position


def check(s: dsh.Session, items: SurfaceItems, position: Position) -> None:
    whole = Position.of(s)
    turns = s.turns
    assert position.seen == whole.seen == len(s)
    assert (position.turn, position.step) == (turns.open_turn or 0, turns.open_step or 0)
    assert (position.last_turn, position.last_step) == (turns.last_turn, turns.last_step)
    assert position.calls == turns.calls == whole.calls
    assert (position.has_output, position.has_results) == (whole.has_output, whole.has_results)
    reference = [item for _, its in node_items(s) for item in its]
    for n in (None, 0, 1, 2, 3, 100, -1):
        want = reference if n is None or n < 0 else [] if n == 0 else reference[-n:]
        assert items.last(s, n) == want, n
    last = next(((seq, its[-1]) for seq, its in reversed(node_items(s)) if its), None)
    assert items.last_node(s) == last


def test_position_and_items_follow_every_plan() -> None:
    s = dsh.Session("sdk")
    items = SurfaceItems()
    position = Position()
    for i, round_ in enumerate(ROUNDS):
        p = Planner(s, SOURCE, position)
        for item in round_:
            p.item(item)
        position = p.position
        check(s, items, position)
        if i in (3, 6):
            position = pop(s, items, position)
            check(s, items, position)


def test_items_are_fresh_copies() -> None:
    s = dsh.Session("sdk")
    items = SurfaceItems()
    p = Planner(s, SOURCE)
    p.item({"role": "user", "content": "hi"})
    first = items.last(s, None)
    first[0]["content"] = "changed"
    assert items.last(s, None) == [{"role": "user", "content": "hi"}]


def test_an_int_beyond_64_bits_comes_back_exact() -> None:
    s = dsh.Session("sdk")
    p = Planner(s, SOURCE)
    big = {"role": "user", "content": "n", "extra": 2**80}
    p.item(big)
    assert SurfaceItems().last(s, None) == [big]


def test_a_message_projection_reads_the_whole_surface() -> None:
    def upper(ev: dsh.Event, ctx: Any) -> Mapping[int, Any]:
        return {
            seq: {**ctx.messages[seq], "content": [{"type": "text", "text": "HI"}]}
            for seq in ev.data["seqs"]
        }

    s = dsh.Session("sdk")
    s.register_message_projection("image/offload", upper)
    items = SurfaceItems()
    p = Planner(s, SOURCE)
    p.item({"role": "user", "content": "hi"})
    assert items.last(s, 1) == [{"role": "user", "content": "hi"}]
    s.append("image/offload", {"seqs": [1], "ref": "r"})
    assert items.last(s, None) == [item for _, its in node_items(s) for item in its]
    assert items.last(s, 1)[0]["content"] == [{"type": "input_text", "text": "HI"}]


@pytest.mark.parametrize("position", [None, Position()])
def test_a_position_that_does_not_match_the_session_is_folded_again(
    position: Position | None,
) -> None:
    s = dsh.Session("sdk")
    Planner(s, SOURCE).item({"role": "user", "content": "hi"})
    p = Planner(s, SOURCE, position)
    assert p.position.seen == len(s) and p.turn == 1


@pytest.mark.parametrize(
    "item",
    [
        {"type": "function_call", "call_id": "c1", "arguments": "{}"},  # no name
        {"type": "function_call_output", "output": "sunny"},  # no call_id
        {"role": "user", "content": 5},
        {"role": "user", "content": ["a bare string where a part goes"]},
        {"type": "reasoning", "summary": ["a bare string where a summary part goes"]},
        "not an item at all",
    ],
)
def test_a_malformed_item_is_an_unsupported_item_not_a_python_error(item: Any) -> None:
    s = dsh.Session("sdk", invariants=True)
    with pytest.raises(UnsupportedItemError):
        Planner(s, SOURCE).item(item)


def test_a_rewritten_tool_result_gives_its_new_output() -> None:
    s = dsh.Session("sdk")
    p = Planner(s, SOURCE)
    for item in ROUNDS[2] + ROUNDS[3]:
        p.item(item)
    result = next(e for e in s.events() if e.type == "tool/result")
    data = json.loads(json.dumps(result.to_json()["data"]))
    data["message"]["content"][0]["content"] = [{"type": "text", "text": "[redacted]"}]
    s.append("tool/result", data, dsh.Replace(result.seq, result.seq), [result.seq])
    want = {"type": "function_call_output", "call_id": "c1", "output": "[redacted]"}
    assert SurfaceItems().last(s, 1) == [want]
    assert [item for _, its in node_items(s) for item in its][-1] == want
