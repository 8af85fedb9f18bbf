"""Properties: any operation sequence keeps the session consistent, a rejected append leaves
no trace, and ``from_restore(events)`` reproduces nodes, generations and messages exactly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import dsh
from tests.support.builders import assistant, state, system, tool_call, tool_result, user


def offload(ev: dsh.Event, ctx: Any) -> Mapping[int, Any]:
    return {
        seq: {**ctx.messages[seq], "content": [{"type": "text", "text": "[offloaded]"}]}
        for seq in ev.data["seqs"]
    }


PROJECTIONS = {"image/offload": offload}

small = st.integers(1, 3)
seq = st.integers(-1, 40)
call = st.sampled_from(["a", "b"])
sources = st.none() | st.lists(seq, max_size=4)
# ("nodes", i, j, cover): a replace of the current nodes at positions i..j (resolved when
# applied, so replaces often hit the surface); cover cites every shadowed node.
node_replace = st.tuples(st.just("nodes"), st.integers(0, 8), st.integers(0, 8), st.booleans())
surface_op = st.one_of(
    st.just("append"),
    st.just("append"),
    node_replace,
    node_replace,
    st.builds(dsh.Replace, seq, seq),
    st.none(),
)

operations = st.one_of(
    st.builds(lambda t: ("turn/start", {"turn": t}, None, None), small),
    st.builds(
        lambda t, k: ("turn/end", {"turn": t, "reason": {"kind": k}}, None, None),
        small,
        st.sampled_from(["completed", "aborted", "interrupted"]),
    ),
    st.builds(lambda t, s: ("step/start", {"turn": t, "step": s}, None, None), small, small),
    st.builds(lambda t, s: ("step/end", {"turn": t, "step": s}, None, None), small, small),
    st.builds(
        lambda i, op, src: ("user/message", user(f"u{i}"), op, src),
        st.integers(0, 9),
        surface_op,
        sources,
    ),
    st.builds(
        lambda t, s, op, src: ("system/message", system(t, s), op, src),
        small,
        small,
        surface_op,
        sources,
    ),
    st.builds(
        lambda t, s, calls, op: (
            "assistant/message",
            assistant(t, s, calls=tuple(calls)),
            op,
            None,
        ),
        small,
        small,
        st.lists(call, max_size=2, unique=True),
        surface_op,
    ),
    st.builds(lambda t, s, c: ("tool/call", tool_call(c, t, s), None, None), small, small, call),
    st.builds(
        lambda t, s, c, body, op, src: ("tool/result", tool_result(c, t, s, body), op, src),
        small,
        small,
        call,
        st.sampled_from(["out", "[pruned]"]),
        surface_op,
        sources,
    ),
    st.builds(
        lambda seqs: ("image/offload", {"seqs": seqs}, None, None),
        st.lists(st.tuples(st.just("node"), st.integers(0, 8)) | seq, max_size=2),
    ),
    st.builds(lambda ign: ("vendor/thing", {"x": 1}, None, None, ign), st.booleans()),
    st.just(("turn/start", {"turn": float("nan")}, None, None)),
)


def resolve(s: dsh.Session, op: tuple[Any, ...]) -> tuple[Any, ...]:
    type_, data, surface, cites, *rest = op
    nodes = s.surface.nodes
    if isinstance(surface, tuple) and surface[0] == "nodes":
        _, i, j, cover = surface
        if not nodes:
            surface = dsh.Replace(0, 0)
        else:
            a, b = i % len(nodes), j % len(nodes)
            surface = dsh.Replace(nodes[a], nodes[b])
            if cover:
                cites = list(nodes[min(a, b) : max(a, b) + 1])
    if type_ == "image/offload":
        picked = [
            (nodes[x[1] % len(nodes)] if nodes else 0) if isinstance(x, tuple) else x
            for x in data["seqs"]
        ]
        data = {"seqs": picked}
    return (type_, data, surface, cites, *rest)


def apply(s: dsh.Session, op: tuple[Any, ...]) -> bool:
    type_, data, surface, cites, *rest = resolve(s, op)
    try:
        s.append(type_, data, surface, cites, ignorable=bool(rest and rest[0]))
    except dsh.ValidationError:
        return False
    return True


def check_consistent(s: dsh.Session) -> None:
    nodes = s.surface.nodes
    assert len(set(nodes)) == len(nodes)
    for n in nodes:
        ev = s.event(n)
        assert ev.type in {"system/message", "user/message", "assistant/message", "tool/result"}
        assert not ev.ignorable or ev.type in {"user/message"}  # only known types are nodes
    assert [e.seq for e in s.events()] == list(range(len(s)))
    times = [e.time for e in s.events()]
    assert times == sorted(times)


@settings(max_examples=300, deadline=None)
@given(st.lists(operations, max_size=40), st.booleans())
def test_random_operations_keep_state_and_restore_identically(
    ops: list[tuple[Any, ...]], invariants: bool
) -> None:
    s = dsh.Session.create("p", clock=lambda: 1, invariants=invariants)
    s.register_message_projection("image/offload", offload)
    for op in ops:
        before = state(s)
        if not apply(s, op):
            assert state(s) == before
        check_consistent(s)
        # the incremental message cache always equals a cold derivation
        cold = dsh.Session.from_restore("c", s.events(), PROJECTIONS, invariants=False)
        assert s.derive_messages() == cold.derive_messages()
    incremental = s.derive_messages()
    r = dsh.Session.from_restore("r", s.events(), projections=PROJECTIONS, invariants=invariants)
    assert r.surface.nodes == s.surface.nodes
    assert r.surface.replace_generation == s.surface.replace_generation
    assert r.surface.content_generation == s.surface.content_generation
    assert r.derive_messages() == incremental
    assert r.transcript() == s.transcript()
    wire = [e.to_json() for e in s.events()]
    w = dsh.Session.from_restore("w", wire, projections=PROJECTIONS, invariants=invariants)
    assert w.derive_messages() == incremental and w.surface.nodes == s.surface.nodes
    assert w.events()[: len(s)] == s.events()


@settings(max_examples=100, deadline=None)
@given(st.lists(operations, max_size=30), st.data())
def test_fork_equals_restore_of_the_prefix(ops: list[tuple[Any, ...]], data: st.DataObject) -> None:
    s = dsh.Session.create("p", clock=lambda: 1, invariants=False)
    s.register_message_projection("image/offload", offload)
    for op in ops:
        apply(s, op)
    if not len(s):
        return
    at = data.draw(st.integers(1, len(s)))
    try:
        child = s.fork("child", at=at)
    except dsh.ForkError as exc:
        assert exc.code == "OPEN_TURN"
        return
    prefix = dsh.Session.from_restore("x", s.events(0, at), PROJECTIONS, invariants=False)
    assert child.events()[:at] == s.events()[:at]
    assert child.event(at).data == {"inherited": True}
    assert child.surface.nodes == prefix.surface.nodes
    assert child.derive_messages() == prefix.derive_messages()
