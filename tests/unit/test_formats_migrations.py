"""Migrations v0→v1→v2→v3 on hand-built logs: what each step changes, and what it refuses."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.errors import FormatError
from dsh.formats import MIGRATIONS, Migration, migrate, read_wire

DATA = Path(__file__).parent / "data" / "formats"
SYSTEM_SOURCE = {"kind": "plugin", "plugin": "migration"}


def log(*events: dict[str, Any]) -> list[dict[str, Any]]:
    """Give hand-written events their seq (= position) and a rising time."""
    return [{**e, "seq": i, "time": 100 + i} for i, e in enumerate(events)]


def ev(type_: str, data: Any = None, **envelope: Any) -> dict[str, Any]:
    return {"type": type_, "data": {} if data is None else data, **envelope}


def user(text: str, **envelope: Any) -> dict[str, Any]:
    message = {"id": text, "role": "user", "content": [{"type": "text", "text": text}]}
    envelope = {"surfaceOp": "append", **envelope}
    return ev("user/message", {**message, "source": {"kind": "user"}}, **envelope)


def chunk(text: str, turn: int = 1, step: int = 1) -> dict[str, Any]:
    delta = {"t": 0, "kind": "text", "text": text}
    return ev("assistant/chunk", {"turn": turn, "step": step, "chunk": delta})


def reply(
    text: str, cites: list[int] | None = None, turn: int = 1, step: int = 1
) -> dict[str, Any]:
    message = {
        "id": text,
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "model", "provider": "p", "model": "m"},
    }
    extra = {} if cites is None else {"sourceEventSeqs": cites}
    return ev(
        "assistant/message",
        {"turn": turn, "step": step, "message": message},
        **extra,
        surfaceOp="append",
    )


def header(system: Any = None, **fields: Any) -> dict[str, Any]:
    hdr: dict[str, Any] = {"config": {}, **fields}
    if system is not None:
        hdr["system"] = system
    return ev("request/header", {"header": hdr, "reason": "step"})


def step(turn: int = 1, n: int = 1) -> dict[str, Any]:
    return ev("step/start", {"turn": turn, "step": n})


def step_end(turn: int = 1, n: int = 1) -> dict[str, Any]:
    return ev("step/end", {"turn": turn, "step": n})


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def texts(event: dict[str, Any]) -> list[str]:
    return [b["text"] for b in event["data"]["message"]["content"]]


def fails(version: int, events: list[dict[str, Any]], code: str, *words: str) -> FormatError:
    with pytest.raises(FormatError) as caught:
        migrate(version, events)
    assert caught.value.code == code
    for word in words:
        assert word in caught.value.message
    return caught.value


# -- whole files, every step in a row ---------------------------------------------------------


@pytest.mark.parametrize("name", ["v0_legacy", "v1_attempts"])
def test_hand_built_file_migrates_to_the_hand_written_v3(name: str) -> None:
    header_, events = read_wire(DATA / f"{name}.jsonl")
    expected_header, expected = read_wire(DATA / f"{name}.v3.jsonl")
    assert (header_.id, header_.created_at, header_.version) == (
        expected_header.id,
        expected_header.created_at,
        3,
    )
    assert header_.source_version == int(name[1])
    assert expected_header.source_version == 3
    assert events == expected


def test_migrate_leaves_its_input_untouched() -> None:
    original = [json.loads(line) for line in (DATA / "v0_legacy.jsonl").read_text().splitlines()]
    events = original[1:]
    before = copy.deepcopy(events)
    migrate(0, events)
    assert events == before


# -- v0 → v1 ----------------------------------------------------------------------------------


def test_v0_renames_legacy_types_and_nothing_else() -> None:
    events = log(
        ev("steering/message", {"id": "s"}, surfaceOp="append"),
        ev("compact/start"),
        ev("compact/end"),
        ev("compaction/start"),
        ev("compactor/run", ignorable=True),
        ev("x/compact/y", ignorable=True),
    )
    out = migrate(0, events, target=1)
    assert types(out) == [
        "user/message",
        "compaction/start",
        "compaction/end",
        "compaction/start",
        "compactor/run",
        "x/compact/y",
    ]
    assert [e["seq"] for e in out] == list(range(6))
    assert out[0]["data"] == {"id": "s"}


# -- v1 → v2 ----------------------------------------------------------------------------------


def test_v1_stream_is_in_log_order_whatever_the_citation_order() -> None:
    out = migrate(1, log(step(), chunk("a"), chunk("b"), reply("ab", cites=[2, 1])), target=2)
    assert types(out) == ["step/start", "assistant/message"]
    assert [d["text"] for d in out[1]["data"]["stream"]] == ["a", "b"]
    assert "sourceEventSeqs" not in out[1]


def test_v1_message_without_chunks_gets_an_empty_stream() -> None:
    out = migrate(1, log(step(), reply("x"), reply("y", cites=[])), target=2)
    assert [e["data"]["stream"] for e in out[1:]] == [[], []]
    assert all("sourceEventSeqs" not in e for e in out)


def test_v1_unclaimed_runs_become_attempts_split_by_other_events_and_steps() -> None:
    out = migrate(
        1,
        log(
            step(),
            chunk("a1"),
            chunk("a2"),
            header(),  # a retry ends the first attempt
            chunk("b1"),
            chunk("c1", step=2),  # another step is another attempt
            chunk("d1"),
            reply("d", cites=[6]),
            step_end(),
        ),
        target=2,
    )
    assert types(out) == [
        "step/start",
        "assistant/attempt",
        "request/header",
        "assistant/attempt",
        "assistant/attempt",
        "assistant/message",
        "step/end",
    ]
    streams = [[d["text"] for d in e["data"]["stream"]] for e in out if "stream" in e["data"]]
    assert streams == [["a1", "a2"], ["b1"], ["c1"], ["d1"]]
    assert out[4]["data"]["step"] == 2
    # an attempt stands where its last chunk stood, at that chunk's time
    assert out[1]["time"] == 100 + 2
    assert [e["seq"] for e in out] == list(range(7))


def test_v1_renumbering_remaps_sources_and_replace_endpoints() -> None:
    events = log(
        step(),  # 0
        user("u"),  # 1
        chunk("x"),  # 2
        chunk("y"),  # 3
        reply("xy", cites=[2, 3]),  # 4 → 2
        ev("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n", "arguments": "{}"}),
        ev("tool/result", {"turn": 1}, surfaceOp="append", sourceEventSeqs=[5]),  # 6 → 4
        user("sum", surfaceOp={"op": "replace", "start": 1, "end": 6}, sourceEventSeqs=[6, 1, 4]),
    )
    out = migrate(1, events, target=2)
    assert [e["seq"] for e in out] == list(range(6))
    assert out[4]["sourceEventSeqs"] == [3]
    assert out[5]["surfaceOp"] == {"op": "replace", "start": 1, "end": 4}
    assert out[5]["sourceEventSeqs"] == [4, 1, 2]  # caller's order kept


@pytest.mark.parametrize(
    ("events", "words"),
    [
        (
            log(step(), user("u"), reply("r", cites=[1])),
            ["v1 seq 2", "cites seq 1", "not an earlier"],
        ),
        (log(step(), reply("r", cites=[2]), chunk("late")), ["cites seq 2"]),
        (
            log(step(), chunk("a"), reply("r", cites=[1]), reply("s", cites=[1])),
            ["already claimed"],
        ),
        (log(step(), chunk("a", step=2), reply("r", cites=[1])), ["belongs to turn/step (1, 2)"]),
        (log(step(), chunk("a"), user("u", sourceEventSeqs=[1])), ["sourceEventSeqs names seq 1"]),
        (
            log(
                step(),
                chunk("a"),
                reply("r", cites=[1]),
                user("u", surfaceOp={"op": "replace", "start": 1, "end": 1}, sourceEventSeqs=[2]),
            ),
            ["surfaceOp.start names seq 1"],
        ),
    ],
    ids=[
        "cites-non-chunk",
        "cites-later",
        "claimed-twice",
        "other-step",
        "chunk-cited",
        "chunk-endpoint",
    ],
)
def test_v1_refuses_what_v2_cannot_express(events: list[dict[str, Any]], words: list[str]) -> None:
    fails(1, events, "UNTRANSLATABLE", *words)


def test_v1_message_with_both_stream_and_chunks_is_refused() -> None:
    events = log(step(), chunk("a"), reply("r", cites=[1]))
    events[2]["data"]["stream"] = []
    fails(1, events, "UNTRANSLATABLE", "both a stream and chunks")


def test_ignorable_event_references_are_opaque_but_still_follow_their_targets() -> None:
    events = log(
        step(),
        chunk("a"),
        reply("a", cites=[1]),
        user("u"),
        ev(
            "vendor/note",
            ignorable=True,
            sourceEventSeqs=[3, 1, "x"],
            surfaceOp={"op": "replace", "start": 3, "end": 99},
        ),
    )
    out = migrate(1, events, target=2)
    # 3 → 2 follows the user message; the folded chunk 1 and the junk are kept as they were
    assert out[3]["sourceEventSeqs"] == [2, 1, "x"]
    assert out[3]["surfaceOp"] == {"op": "replace", "start": 2, "end": 99}


# -- v2 → v3 ----------------------------------------------------------------------------------


def test_v2_first_step_gets_an_empty_system_message_when_no_prompt_is_known() -> None:
    out = migrate(2, log(ev("turn/start", {"turn": 1}), step(), user("u")))
    assert types(out) == ["turn/start", "step/start", "system/message", "user/message"]
    system = out[2]
    assert system["surfaceOp"] == "append"
    assert "sourceEventSeqs" not in system
    assert system["time"] == out[1]["time"]
    assert system["data"] == {
        "turn": 1,
        "step": 1,
        "message": {
            "id": "migration-system-2",
            "role": "system",
            "content": [],
            "source": SYSTEM_SOURCE,
        },
    }


def test_v2_prompt_known_before_the_first_step_goes_into_the_first_message() -> None:
    out = migrate(
        2, log(ev("turn/start", {"turn": 1}), header("Be kind."), step(), header("Be kind."))
    )
    assert types(out) == [
        "turn/start",
        "request/header",
        "step/start",
        "system/message",
        "request/header",
    ]
    assert texts(out[3]) == ["Be kind."]
    assert all("system" not in e["data"]["header"] for e in out if e["type"] == "request/header")


def test_v2_prompt_changes_replace_the_current_head_and_cite_it() -> None:
    blocks = [{"type": "text", "text": "B1"}, {"type": "text", "text": "B2"}]
    out = migrate(
        2,
        log(
            step(),
            header("A"),  # no prompt yet → a replacement of the empty head
            header("A"),  # unchanged → nothing
            header(),  # no key → unchanged
            step_end(),
            step(n=2),
            header(blocks),
            header(""),
        ),
    )
    assert types(out) == [
        "step/start",
        "system/message",  # 1
        "system/message",  # 2 A
        "request/header",
        "request/header",
        "request/header",
        "step/end",
        "step/start",
        "system/message",  # 8 B
        "request/header",
        "system/message",  # 10 empty
        "request/header",
    ]
    heads = [e for e in out if e["type"] == "system/message"]
    assert [texts(e) for e in heads] == [[], ["A"], ["B1", "B2"], []]
    assert [e.get("sourceEventSeqs") for e in heads] == [None, [1], [2], [8]]
    assert [e["surfaceOp"] for e in heads[1:]] == [
        {"op": "replace", "startSeq": s, "endSeq": s} for s in (1, 2, 8)
    ]
    assert [(e["data"]["turn"], e["data"]["step"]) for e in heads] == [
        (1, 1),
        (1, 1),
        (1, 2),
        (1, 2),
    ]
    assert heads[2]["time"] == out[9]["time"]  # the change stands just before its header


def test_v2_empty_or_null_tools_and_adapter_defaults_are_dropped_others_kept() -> None:
    tools = [{"name": "t"}]
    out = migrate(
        2,
        log(
            step(),
            header(tools=[], adapterDefaults={}),
            header(tools=tools, adapterDefaults={"k": 1}),
            header(tools=None),
        ),
    )
    assert [e["data"]["header"] for e in out[2:]] == [
        {"config": {}},
        {"config": {}, "tools": tools, "adapterDefaults": {"k": 1}},
        {"config": {}},
    ]


def test_v2_renames_replace_endpoints_and_remaps_them_past_inserted_events() -> None:
    out = migrate(
        2,
        log(
            step(),  # 0
            user("a"),  # 1 → 2
            header("P"),  # 2 → 4 (system/message at 3)
            user("b", surfaceOp={"op": "replace", "start": 1, "end": 1}, sourceEventSeqs=[1, 2]),
        ),
    )
    assert out[5]["surfaceOp"] == {"op": "replace", "startSeq": 2, "endSeq": 2}
    assert out[5]["sourceEventSeqs"] == [2, 4]
    assert [e["seq"] for e in out] == list(range(6))


@pytest.mark.parametrize(
    ("events", "words"),
    [
        (log(user("early"), step()), ["v2 seq 0", "user/message before the first step/start"]),
        (
            log(ev("turn/start", {"turn": 1}), header("A"), header("B"), step()),
            ["changes outside an open step"],
        ),
        (log(step(), header("A"), step_end(), header("B")), ["changes outside an open step"]),
        (
            log(step(), ev("turn/end", {"turn": 1, "reason": {"kind": "completed"}}), header("B")),
            ["changes outside an open step"],
        ),
        (log(ev("turn/start", {"turn": 1}), header("A")), ["no step ever opens"]),
        (log(step(), ev("request/header", {"header": {"system": None}})), ["header.system"]),
        (log(step(), ev("request/header", {"header": []})), ["data.header must be an object"]),
    ],
    ids=[
        "surface-first",
        "change-before-step",
        "change-after-step-end",
        "change-after-turn-end",
        "prompt-without-step",
        "null-prompt",
        "bad-header",
    ],
)
def test_v2_refuses_what_v3_cannot_express(events: list[dict[str, Any]], words: list[str]) -> None:
    fails(2, events, "UNTRANSLATABLE", *words)


def test_v2_ignorable_events_before_the_first_step_are_not_surface_events() -> None:
    out = migrate(2, log(ev("user/message", {"x": 1}, ignorable=True), step()))
    assert types(out) == ["user/message", "step/start", "system/message"]


# -- the route ----------------------------------------------------------------------------------


def test_future_version_is_refused() -> None:
    err = fails(4, [], "FUTURE_VERSION", "version 4")
    assert isinstance(err, FormatError)


@pytest.mark.parametrize("version", [-1])
def test_unknown_old_version_has_no_route(version: int) -> None:
    fails(version, [], "NO_MIGRATION_ROUTE", f"version {version}")


def test_a_gap_in_the_registry_is_no_route_not_a_jump() -> None:
    registry = {k: m for k, m in MIGRATIONS.items() if k != 1}
    with pytest.raises(FormatError) as caught:
        migrate(0, [], registry=registry)
    assert caught.value.code == "NO_MIGRATION_ROUTE"
    assert "no step from version 1" in caught.value.message
    assert migrate(2, [], registry=registry) == []


def test_registry_steps_are_adjacent() -> None:
    assert sorted(MIGRATIONS) == [0, 1, 2]
    assert all(m.target == m.source + 1 for m in MIGRATIONS.values())
    assert isinstance(MIGRATIONS[0], Migration)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_seqs_must_equal_positions_before_anything_is_renumbered(version: int) -> None:
    events = log(step(), user("u"))
    events[1]["seq"] = 5
    fails(version, events, "UNTRANSLATABLE", "v", "seq 5", '"seq" must be 1')


def test_errors_name_the_file_line(tmp_path: Path) -> None:
    lines = [json.dumps({"type": "session", "version": 2, "id": "s", "createdAt": 0})]
    lines += [json.dumps(e) for e in log(step(), step_end(), header("late"))]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as caught:
        read_wire(path)
    assert caught.value.message.startswith("line 4 (v2 seq 2):")


# -- properties ---------------------------------------------------------------------------------


@st.composite
def v1_logs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random v1 logs where every event carries a marker, so identity survives renumbering."""
    events: list[dict[str, Any]] = [step()]
    free_chunks: list[int] = []
    for n in range(draw(st.integers(0, 30))):
        seq = len(events)
        targets = [i for i, e in enumerate(events) if e["type"] != "assistant/chunk"]
        kind = draw(st.sampled_from(["chunk", "chunk", "reply", "user", "cite", "other"]))
        if kind == "chunk":
            events.append(chunk(f"c{n}", step=draw(st.integers(1, 2))))
            free_chunks.append(seq)
        elif kind == "reply":
            same = [c for c in free_chunks if events[c]["data"]["step"] == 1]
            cites = draw(st.lists(st.sampled_from(same), unique=True)) if same else []
            free_chunks = [c for c in free_chunks if c not in cites]
            events.append(reply(f"r{n}", cites=cites))
        elif kind == "user":
            events.append(user(f"u{n}"))
        elif kind == "cite":
            start, end = sorted(draw(st.lists(st.sampled_from(targets), min_size=2, max_size=2)))
            sources = draw(st.lists(st.sampled_from(targets), min_size=1, unique=True))
            op = {"op": "replace", "start": start, "end": end}
            events.append(user(f"u{n}", surfaceOp=op, sourceEventSeqs=sources))
        else:
            events.append(ev("vendor/thing", {"n": n}, ignorable=True))
    return log(*events)


def _mark(event: dict[str, Any]) -> Any:
    data = event["data"]
    return json.dumps(data.get("message", data), sort_keys=True)


@settings(max_examples=200, deadline=None)
@given(v1_logs())
def test_property_v1_fold_keeps_every_delta_and_every_reference_target(
    events: list[dict[str, Any]],
) -> None:
    out = migrate(1, events, target=2)
    assert [e["seq"] for e in out] == list(range(len(out)))
    assert "assistant/chunk" not in types(out)
    # every chunk's delta lives on in exactly one stream, in log order
    deltas = [e["data"]["chunk"] for e in events if e["type"] == "assistant/chunk"]
    streamed = [d for e in out if "stream" in e["data"] for d in e["data"]["stream"]]
    assert sorted(map(json.dumps, deltas)) == sorted(map(json.dumps, streamed))
    # references still point at the same events
    by_mark_old = {_mark(e): e for e in events if e["type"] != "assistant/chunk"}
    for new in out:
        if new["type"] in ("assistant/attempt", "assistant/message"):
            continue
        old = by_mark_old[_mark(new)]
        for old_ref, new_ref in zip(
            old.get("sourceEventSeqs", []), new.get("sourceEventSeqs", []), strict=True
        ):
            assert _mark(events[old_ref]) == _mark(out[new_ref])
        if isinstance(old.get("surfaceOp"), dict):
            for key in ("start", "end"):
                assert _mark(events[old["surfaceOp"][key]]) == _mark(out[new["surfaceOp"][key]])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["header", "user", "step"]), st.sampled_from(["A", "B", "", None])
        )
    )
)
def test_property_v2_one_system_message_per_prompt_change_each_citing_the_last(
    ops: list[tuple[str, str | None]],
) -> None:
    events, n = [step()], 1
    for op, prompt in ops:
        if op == "header":
            events.append(header(prompt))
        elif op == "user":
            events.append(user(f"u{len(events)}"))
        else:
            n += 1
            events += [step_end(n=n - 1), step(n=n)]
    events.append(step_end(n=n))
    out = migrate(2, log(*events))
    systems = [e for e in out if e["type"] == "system/message"]
    current: list[Any] = []
    changes = 0
    for op, prompt in ops:
        if op == "header" and prompt is not None:
            blocks = [{"type": "text", "text": prompt}] if prompt else []
            changes += blocks != current
            current = blocks
    assert len(systems) == 1 + changes
    assert systems[-1]["data"]["message"]["content"] == current
    for before, after in itertools.pairwise(systems):
        assert after["sourceEventSeqs"] == [before["seq"]]
        assert after["surfaceOp"] == {
            "op": "replace",
            "startSeq": before["seq"],
            "endSeq": before["seq"],
        }
    assert len(out) == len(events) + len(systems)
    assert [e["seq"] for e in out] == list(range(len(out)))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("line", [[1, 2], "an event", 5, None])
def test_a_line_that_is_not_an_event_object_is_a_typed_error(version: int, line: Any) -> None:
    with pytest.raises(FormatError) as refused:
        migrate(version, [ev("turn/start", {"turn": 1}, seq=0, time=1), line])
    assert refused.value.code == "UNTRANSLATABLE" and "JSON object" in refused.value.message
