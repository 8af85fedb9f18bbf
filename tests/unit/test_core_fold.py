"""The resumable surface fold (``dsh.fold``): folding a log in one go equals folding a prefix,
snapshotting the state the way a projector keeps it, resuming and folding the rest; plan touches
nothing; steps and changes say what happened; the light fold; Session's public fold hooks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dsh
from dsh.fold import APPEND, LOG, OPAQUE, PROJECTION, REPLACE, FoldSnapshot, Node, SurfaceFold
from dsh.json_snapshot import freeze
from dsh.messages import DROP_WHEN_EMPTY, projects_to_nothing
from tests.support.builders import assistant, in_step, new, system, tool_result, user

from .test_core_properties import PROJECTIONS, apply, operations


def plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def through_redis(snapshot: FoldSnapshot) -> FoldSnapshot:
    """The snapshot as a projector stores and loads it: ints as text, each node's record as
    compact JSON text read back frozen (what projectors.surface writes and loads)."""
    records = None
    if snapshot.records is not None:
        records = {}
        for seq, node in snapshot.records.items():
            record: dict[str, Any] = {"type": node.type, "message": node.message}
            if node.data is not None:
                record["data"] = node.data
            back = json.loads(json.dumps(plain(record), separators=(",", ":")))
            data = back.get("data")
            records[int(str(seq))] = Node(
                back["type"], freeze(back["message"]), None if data is None else freeze(data)
            )
    return FoldSnapshot(
        int(str(snapshot.next_seq)),
        tuple(int(str(n)) for n in snapshot.nodes),
        records,
        int(str(snapshot.replace_generation)),
        int(str(snapshot.content_generation)),
    )


def random_log(ops: list[tuple[Any, ...]], invariants: bool) -> tuple[dsh.Event, ...]:
    s = dsh.Session.create("p", clock=lambda: 1, invariants=invariants)
    s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    for op in ops:
        apply(s, op)
    return s.events()


# Surface-heavy logs: appends of every surface type (some empty), replaces of random ranges,
# tool-result rewrites, offloads, log-only and opaque events; positions resolved when applied.
index = st.integers(0, 30)
surface_ops = st.one_of(
    st.tuples(st.just("user"), st.integers(0, 9)),
    st.tuples(st.just("system"), st.booleans()),
    st.tuples(st.just("assistant"), st.booleans()),
    st.tuples(st.just("tool"), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("replace"), index, index, st.sampled_from(["user", "system", "assistant"])),
    st.tuples(st.just("prune"), index),
    st.tuples(st.just("offload"), st.lists(index, max_size=3)),
    st.just(("log",)),
    st.just(("opaque",)),
)


def surface_log(ops: list[tuple[Any, ...]]) -> tuple[dsh.Event, ...]:
    s = new(invariants=False)
    s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    for op in ops:
        nodes = s.surface.nodes
        kind = op[0]
        try:
            if kind == "user":
                s.append("user/message", user(f"u{op[1]}"), "append")
            elif kind == "system":
                s.append("system/message", system(body="be brief" if op[1] else ""), "append")
            elif kind == "assistant":
                s.append("assistant/message", assistant(body="ok" if op[1] else ""), "append")
            elif kind == "tool":
                s.append("tool/result", tool_result(op[1]), "append")
            elif kind == "replace" and nodes:
                a, b = sorted((op[1] % len(nodes), op[2] % len(nodes)))
                data = {"user": user("sum"), "system": system(mid="s2"), "assistant": assistant()}
                cited = list(nodes[a : b + 1])
                replace = dsh.Replace(nodes[a], nodes[b])
                s.append(f"{op[3]}/message", data[op[3]], replace, cited)
            elif kind == "prune" and nodes:
                target = s.event(nodes[op[1] % len(nodes)])
                call = (
                    target.data["message"]["source"]["callId"]
                    if target.type == "tool/result"
                    else "c1"
                )
                replace = dsh.Replace(target.seq, target.seq)
                s.append("tool/result", tool_result(call, body="[pruned]"), replace, [target.seq])
            elif kind == "offload" and nodes:
                seqs = sorted({nodes[i % len(nodes)] for i in op[1]})
                s.append("image/offload", {"seqs": seqs})
            elif kind == "log":
                s.append("request/context", {"provider": "p", "model": "m"})
            elif kind == "opaque":
                s.append("vendor/thing", {"x": 1}, "append", [0], ignorable=True)
        except dsh.ValidationError:
            continue  # e.g. a replace the node-0 rule refuses: the log stays valid
    return s.events()


logs = st.one_of(
    st.lists(surface_ops, max_size=60).map(surface_log),
    st.builds(random_log, st.lists(operations, max_size=40), st.booleans()),
)


def observed(fold: SurfaceFold) -> tuple[Any, ...]:
    surface = fold.surface
    return (
        fold.next_seq,
        surface.nodes,
        surface.replace_generation,
        surface.content_generation,
        plain(fold.derive_messages()),
        plain({seq: fold.node(seq)._asdict() for seq in surface.nodes}),
    )


@settings(max_examples=300, deadline=None)
@given(logs, st.data())
def test_resuming_from_a_snapshot_equals_folding_in_one_go(
    events: tuple[dsh.Event, ...], data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(events)))
    whole = SurfaceFold()
    for ev in events:
        whole.apply(ev, PROJECTIONS)
    head = SurfaceFold()
    for ev in events[:at]:
        head.apply(ev, PROJECTIONS)
    resumed = SurfaceFold.from_snapshot(through_redis(head.snapshot()))
    for ev in events[at:]:
        resumed.apply(ev, PROJECTIONS)
    assert observed(resumed) == observed(whole)
    assert plain(resumed.snapshot().records) == plain(whole.snapshot().records)
    # ...and both are what the Session (built on the same fold) says.
    core = dsh.Session.from_restore("c", events, PROJECTIONS, invariants=False)
    if events and events[-1].type != "session/end-seed":
        whole.apply(core.event(len(events)), PROJECTIONS)  # restore's end marker
    assert whole.surface.nodes == core.surface.nodes
    assert (whole.surface.replace_generation, whole.surface.content_generation) == (
        core.surface.replace_generation,
        core.surface.content_generation,
    )
    assert whole.derive_messages() == core.derive_messages()
    # A light fold resumed from the node list alone tracks the same nodes.
    light = SurfaceFold.from_snapshot(FoldSnapshot(at, head.surface.nodes, None))
    for ev in events[at:]:
        light.apply(ev, {})
    assert light.surface.nodes == resumed.surface.nodes


@settings(max_examples=150, deadline=None)
@given(st.lists(operations, max_size=40))
def test_plan_touches_nothing_and_a_rejected_event_leaves_no_trace(
    ops: list[tuple[Any, ...]],
) -> None:
    s = new(invariants=False)
    s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    fold = SurfaceFold()
    for op in ops:
        if not apply(s, op):
            continue
        ev = s.event(len(s) - 1)
        before = observed(fold)
        step = fold.plan(ev, PROJECTIONS)
        assert observed(fold) == before  # planned, not applied
        fold.commit(ev, step)
        assert fold.surface.nodes == s.surface.nodes
    for ev in (
        dsh.Event("user/message", fold.next_seq, 1, user(), dsh.Replace(10**6, 10**6), (0,)),
        dsh.Event("vendor/thing", fold.next_seq, 1, {}),
        dsh.Event("user/message", fold.next_seq + 1, 1, user(), "append"),
    ):
        before = observed(fold)
        with pytest.raises(dsh.ValidationError):
            fold.plan(ev, PROJECTIONS)
        assert observed(fold) == before


def test_steps_and_changes_say_what_happened() -> None:
    s = in_step(invariants=False)
    s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    s.append("system/message", system(), "append")  # 3
    s.append("assistant/message", assistant(), "append")  # 4
    s.append("user/message", user("sum"), dsh.Replace(1, 4), [1, 3, 4])  # 5 replaces 1, 3, 4
    s.append("image/offload", {"seqs": [5]})  # 6
    s.append("vendor/x", {}, ignorable=True)  # 7
    fold = SurfaceFold()
    kinds, changes = [], []
    for ev in s.events():
        step = fold.plan(ev, PROJECTIONS)
        kinds.append(step.kind)
        assert step.adds_node == (step.kind in (APPEND, REPLACE))
        fold.commit(ev, step)
    assert kinds == [LOG, APPEND, LOG, APPEND, APPEND, REPLACE, PROJECTION, OPAQUE]
    again = SurfaceFold()
    changes = [again.apply(ev, PROJECTIONS) for ev in s.events()]
    assert changes[1].added == 1 and not changes[1].shadowed
    assert (changes[5].added, changes[5].shadowed) == (5, (1, 3, 4))
    assert (changes[6].added, changes[6].rewritten) == (None, (5,))
    assert changes[0] == changes[7] == type(changes[0])()
    assert again.node(5).message["content"] == [{"type": "text", "text": "[offloaded]"}]
    assert again.node(5).type == "user/message" and again.node(5).data is None
    assert again.derive_messages() == s.derive_messages()


def test_a_tool_result_node_keeps_its_data_for_a_later_rewrite() -> None:
    s = in_step(invariants=False)
    s.append("tool/result", tool_result("c1"), "append")  # 3
    fold = SurfaceFold()
    for ev in s.events():
        fold.apply(ev, {})
    assert fold.node(3).data == s.event(3).data
    resumed = SurfaceFold.from_snapshot(through_redis(fold.snapshot()))
    changed = dsh.Event(
        "tool/result", 4, 1, tool_result("c1", step=2, body="x"), dsh.Replace(3, 3), (3,)
    )
    with pytest.raises(dsh.SurfaceError) as err:
        resumed.plan(changed, {})
    assert err.value.code == "TOOL_REWRITE_CHANGED"
    pruned = dsh.Event(
        "tool/result", 4, 1, tool_result("c1", body="[pruned]"), dsh.Replace(3, 3), (3,)
    )
    assert resumed.apply(pruned, {}).shadowed == (3,)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"x": True}, {"x": 1}),
        ({"x": 1}, {"x": 1.0}),
        ({"x": [0]}, {"x": [False]}),
        ({"x": {"y": 1.0}}, {"x": {"y": True}}),
    ],
)
def test_a_tool_result_rewrite_compares_json_strictly(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    # True == 1 == 1.0 in Python; as JSON (and on the wire) they are different values.
    s = in_step(invariants=False)
    s.append("tool/result", {**tool_result("c1"), "meta": before}, "append")  # 3
    rewrite = {**tool_result("c1", body="[pruned]"), "meta": after}
    with pytest.raises(dsh.SurfaceError) as err:
        s.append("tool/result", rewrite, dsh.Replace(3, 3), [3])
    assert err.value.code == "TOOL_REWRITE_CHANGED" and len(s) == 4
    s.append("tool/result", {**rewrite, "meta": before}, dsh.Replace(3, 3), [3])


def test_the_next_seq_is_a_rule_of_the_fold() -> None:
    fold = SurfaceFold()
    with pytest.raises(dsh.ValidationError) as err:
        fold.plan(dsh.Event("turn/start", 1, 1, {"turn": 1}), {})
    assert err.value.code == "SEQ_NOT_NEXT"
    assert err.value.message == "event 1: the next seq is 0"


def test_a_light_fold_takes_a_message_projection_of_any_registered_type() -> None:
    """The transcript and audit projectors fold with no interpreters: a projection type the
    writer had an interpreter for (any name, not only the builtin ones) must not block them.
    A full fold without its interpreter still refuses it."""
    s = new(invariants=False)
    s.append("user/message", user(), "append")  # 0
    vendor = dsh.Event("vendor/redact", 1, 1, {"seqs": [0]})
    light = SurfaceFold(full_checks=False)
    light.apply(next(iter(s.events())), {})
    assert light.apply(vendor, {}).rewritten == ()
    assert light.next_seq == 2 and light.surface.nodes == (0,)
    with pytest.raises(dsh.ProjectionError) as err:
        light.plan(dsh.Event("vendor/redact", 2, 1, {"seqs": [0]}, "append"), {})
    assert err.value.code == "PROJECTION_ENVELOPE"
    full = SurfaceFold()
    full.apply(next(iter(s.events())), {})
    with pytest.raises(dsh.ValidationError) as unknown:
        full.plan(vendor, {})
    assert unknown.value.code == "UNKNOWN_TYPE"


def test_the_light_fold_tracks_nodes_only() -> None:
    s = new(invariants=False)
    s.append("system/message", system(), "append")  # 0
    s.append("user/message", user(), "append")  # 1
    events = list(s.events())
    # Breaks the node-0 rule, and has no interpreter: a full fold refuses both...
    events.append(dsh.Event("user/message", 2, 1, user(), dsh.Replace(0, 1), (0, 1)))
    full = SurfaceFold()
    for ev in events[:2]:
        full.apply(ev, {})
    with pytest.raises(dsh.SurfaceError) as refused:
        full.plan(events[2], {})
    assert refused.value.code == "NODE0_REPLACEMENT_NOT_SYSTEM"
    with pytest.raises(dsh.ProjectionError) as err:
        full.plan(dsh.Event("image/offload", 2, 1, {"seqs": [1]}), {})
    assert err.value.code == "PROJECTION_INTERPRETER_MISSING"
    # ...a light one knows only which nodes are current: it checks what needs nothing more.
    light = SurfaceFold(full_checks=False)
    assert not light.full_checks
    for ev in events:
        light.apply(ev, {})
    assert light.surface.nodes == (2,)
    assert light.apply(dsh.Event("image/offload", 3, 1, {"seqs": [2]}), {}).rewritten == ()
    assert light.surface.content_generation == 2
    with pytest.raises(dsh.ProjectionError) as err:
        light.plan(dsh.Event("image/offload", 4, 1, {"seqs": [2]}, "append"), {})
    assert err.value.code == "PROJECTION_ENVELOPE"
    with pytest.raises(ValueError):
        light.derive_messages()
    assert light.snapshot() == FoldSnapshot(4, (2,), None, 1, 2)


def test_empty_system_and_assistant_messages_project_to_nothing() -> None:
    assert {"system/message", "assistant/message"} == DROP_WHEN_EMPTY
    assert projects_to_nothing("assistant/message", {"content": []})
    assert not projects_to_nothing("user/message", {"content": []})
    assert not projects_to_nothing("system/message", {"content": [{"type": "text", "text": "x"}]})
    s = in_step(invariants=False)
    s.append("system/message", system(body=""), "append")
    fold = SurfaceFold()
    for ev in s.events():
        fold.apply(ev, {})
    assert fold.surface.nodes == (1, 3) and fold.derive_messages() == [s.event(1).data]


# -- the public hooks restore, fork and repair use ------------------------------------------


def test_append_logged_keeps_seq_and_time_and_applies_every_rule() -> None:
    s = new()
    seen: list[dsh.Event] = []
    s.subscribe(seen.append)
    ev = dsh.Event("turn/start", 0, 5, {"turn": 1})
    s.append_logged([ev])
    assert s.event(0) is ev and s.last_time == 5 and not seen  # listeners are not told
    with pytest.raises(dsh.InvariantError):
        s.append_logged([dsh.Event("turn/start", 1, 6, {"turn": 2})])
    with pytest.raises(dsh.ValidationError) as err:
        s.append_logged([dsh.Event("user/message", 5, 6, user(), "append")])
    assert err.value.code == "SEQ_NOT_NEXT"
    assert len(s) == 1 and s.last_time == 5
    logged = [
        dsh.Event("user/message", 1, 3, user(), "append"),  # a logged time stays as logged
        dsh.Event("step/start", 2, 3, {"turn": 1, "step": 1}),
        dsh.Event("step/start", 3, 3, {"turn": 1, "step": 2}),  # rejected: step 1 is open
        dsh.Event("user/message", 4, 3, user(), "append"),
    ]
    with pytest.raises(dsh.InvariantError) as refused:
        s.append_logged(logged)
    assert refused.value.code == "STEP_ALREADY_OPEN"
    assert s.events() == (ev, *logged[:2])  # the events before the rejected one stay
    assert s.event(1).time == 3 and s.last_time == 5
    assert s.append("user/message", user(), "append").time >= 5


def test_append_logged_refuses_reentry_and_a_removed_interpreter() -> None:
    s = in_step()

    def reenter(ev: dsh.Event) -> None:
        s.append_logged([dsh.Event("user/message", len(s), 1, user(), "append")])

    s.subscribe(reenter)
    s.append("user/message", user(), "append")  # the listener's failure is contained
    assert len(s) == 4

    def appending(ev: dsh.Event, ctx: Any) -> Mapping[int, Any]:
        s.append("user/message", user(), "append")
        return {}

    s.register_message_projection("vendor/offload", appending)
    with pytest.raises(dsh.ProjectionError) as err:
        s.append_logged([dsh.Event("vendor/offload", len(s), 1, {})])
    assert err.value.code == "PROJECTION_FAILED" and "inside a listener" in err.value.message
    remove = s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    s.append("image/offload", {"seqs": [1]})
    remove()
    with pytest.raises(dsh.ProjectionError):
        s.append_logged([dsh.Event("user/message", len(s), 1, user(), "append")])


def test_the_session_exposes_its_clock_projections_and_turn_state() -> None:
    clock = lambda: 7  # noqa: E731
    s = dsh.Session.create("t", clock=clock)
    assert s.clock is clock and s.last_time == 0
    s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    projections: Mapping[str, Any] = s.projections
    assert dict(projections) == PROJECTIONS
    with pytest.raises(TypeError):
        projections["x/y"] = PROJECTIONS["image/offload"]  # type: ignore[index]
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    assert (s.turns.open_turn, s.turns.open_step) == (1, 1)
