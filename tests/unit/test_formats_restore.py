"""A migrated log must restore as a valid v3 session (CONTRACT §5), checked with the core itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import dsh
from dsh.formats import migrate, read_jsonl

DATA = Path(__file__).parent / "data" / "formats"
MODEL = {"kind": "model", "provider": "p", "model": "m"}


def texts(message: Any) -> list[str]:
    out = []
    for block in message["content"]:
        if block["type"] == "tool-result":
            out += [b["text"] for b in block["content"]]
        elif block["type"] == "tool-call":
            out.append(f"call {block['name']}")
        else:
            out.append(block["text"])
    return out


def restore(path: Path) -> Any:
    header, events = read_jsonl(path)
    return dsh.Session.from_restore(header.id, events)


def test_v0_file_restores_with_the_prompt_at_node_zero() -> None:
    session = restore(DATA / "v0_legacy.jsonl")
    assert session.surface.nodes == (4, 12)
    assert [(m["role"], texts(m)) for m in session.derive_messages()] == [
        ("system", ["Be brief."]),
        ("user", ["Summary: we greeted."]),
    ]
    assert session.event(len(session) - 1).type == "session/end-seed"


def test_v1_file_restores_with_attempts_folded_and_rewrites_kept() -> None:
    session = restore(DATA / "v1_attempts.jsonl")
    assert session.surface.nodes == (13, 3, 8, 20, 15)
    assert [(m["role"], texts(m)) for m in session.derive_messages()] == [
        ("system", ["Use tools. Be short."]),
        ("user", ["Weather?"]),
        ("assistant", ["call weather"]),
        ("user", ["[elided]"]),
        ("assistant", ["Sunny"]),
    ]
    assert session.surface.replace_generation == 3


def test_migrated_files_equal_their_hand_written_v3_as_sessions() -> None:
    for name in ("v0_legacy", "v1_attempts"):
        migrated, native = restore(DATA / f"{name}.jsonl"), restore(DATA / f"{name}.v3.jsonl")
        assert migrated.events() == native.events()


# -- property: any well-formed old log restores -------------------------------------------------


def _message(role: str, text: str, source: dict[str, Any]) -> dict[str, Any]:
    return {"id": text, "role": role, "content": [{"type": "text", "text": text}], "source": source}


@st.composite
def old_logs(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]], list[Any]]:
    """A v0 or v1 log of well-formed turns (chunks, retries, prompt changes, compaction replaces);
    returns it with the prompt that should end up at node 0."""
    events: list[dict[str, Any]] = []
    nodes: list[int] = []  # the v1 surface, to pick valid replace ranges
    prompt: list[Any] = []

    def add(type_: str, data: Any, **envelope: Any) -> int:
        events.append(
            {"type": type_, "seq": len(events), "time": len(events), "data": data, **envelope}
        )
        return len(events) - 1

    for turn in range(1, draw(st.integers(1, 3)) + 1):
        add("turn/start", {"turn": turn})
        for step in range(1, draw(st.integers(1, 3)) + 1):
            add("step/start", {"turn": turn, "step": step})
            if draw(st.booleans()):
                nodes.append(
                    add(
                        "user/message",
                        _message("user", f"u{len(events)}", {"kind": "user"}),
                        surfaceOp="append",
                    )
                )
            for _ in range(draw(st.integers(1, 2))):  # a retry logs a header per attempt
                system = draw(st.sampled_from([None, "A", "B", ""]))
                header: dict[str, Any] = {"config": {}, "tools": []}
                if system is not None:
                    header["system"] = system
                    prompt = [{"type": "text", "text": system}] if system else []
                add("request/header", {"header": header, "reason": "step"})
                chunks = [
                    add(
                        "assistant/chunk",
                        {
                            "turn": turn,
                            "step": step,
                            "chunk": {"t": i, "kind": "text", "text": f"c{i}"},
                        },
                    )
                    for i in range(draw(st.integers(0, 2)))
                ]
            text = f"a{len(events)}"
            data = {"turn": turn, "step": step, "message": _message("assistant", text, MODEL)}
            nodes.append(add("assistant/message", data, surfaceOp="append", sourceEventSeqs=chunks))
            add("step/end", {"turn": turn, "step": step})
            if len(nodes) >= 2 and draw(st.booleans()):
                start = draw(st.integers(0, len(nodes) - 2))
                end = draw(st.integers(start, len(nodes) - 1))
                shadowed = nodes[start : end + 1]
                summary = _message(
                    "user", f"s{len(events)}", {"kind": "plugin", "plugin": "compaction"}
                )
                add("compaction/start", {})
                seq = add(
                    "user/message",
                    summary,
                    sourceEventSeqs=shadowed,
                    surfaceOp={"op": "replace", "start": nodes[start], "end": nodes[end]},
                )
                nodes[start : end + 1] = [seq]
        add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    version = draw(st.sampled_from([0, 1]))
    if version == 0:  # the same log under its legacy names
        legacy = {"user/message": "steering/message", "compaction/start": "compact/start"}
        events = [{**e, "type": legacy.get(e["type"], e["type"])} for e in events]
    return version, events, prompt


@settings(max_examples=150, deadline=None)
@given(old_logs())
def test_property_any_well_formed_old_log_restores_as_v3(
    case: tuple[int, list[dict[str, Any]], list[Any]],
) -> None:
    version, events, prompt = case
    migrated = migrate(version, events)
    session = dsh.Session.from_restore("prop", migrated)
    head = session.event(session.surface.nodes[0])
    assert head.type == "system/message"
    assert head.to_json()["data"]["message"]["content"] == prompt
    again = dsh.Session.from_restore("prop", [e.to_json() for e in session.events()])
    assert again.surface.nodes == session.surface.nodes
    assert again.derive_messages() == session.derive_messages()
