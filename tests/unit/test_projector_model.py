"""The projectors' surface step agrees with the core on random sessions: same nodes,
generations and messages after every event, also when resumed from the state it writes to
Redis; and it refuses what the core refuses (turn invariants aside, which are the writer's)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import dsh
from dsh.errors import InvariantError, SessionError
from dsh.fold import SurfaceFold
from projectors.audit import AuditProjection
from projectors.keys import Keys
from projectors.projection import Projection, advance
from projectors.surface import SurfaceProjection
from projectors.transcript import TranscriptProjection

from .test_core_properties import PROJECTIONS, operations, resolve


class FakeRedis:
    """Just enough of Redis to run the ops of lua/apply.lua in memory."""

    def __init__(self) -> None:
        self.hashes: dict[str, dict[bytes, bytes]] = {}
        self.streams: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self.lists: dict[str, list[bytes]] = {}

    def apply(self, keys: list[str], seq: int, ops: list[Any]) -> None:
        meta = self.hashes.setdefault(keys[0], {})
        assert int(meta.get(b"applied", b"-1")) == seq - 1
        i = 0
        while i < len(ops):
            op, key = ops[i], keys[int(ops[i + 1]) - 1]
            h = self.hashes.setdefault(key, {})
            if op == "H":
                h[str(ops[i + 2]).encode()] = str(ops[i + 3]).encode()
                i += 4
            elif op == "D":
                h.pop(str(ops[i + 2]).encode(), None)
                i += 3
            elif op == "A":
                field = str(ops[i + 2]).encode()
                old = h.get(field)
                h[field] = (old + b"," if old else b"") + str(ops[i + 3]).encode()
                i += 4
            elif op == "R":
                self.lists.setdefault(key, []).append(str(ops[i + 2]).encode())
                i += 3
            elif op == "L":
                items = self.lists[key]
                first = items.index(str(ops[i + 2]).encode())
                last = items.index(str(ops[i + 3]).encode())
                assert first <= last
                items[first : last + 1] = [str(ops[i + 4]).encode()]
                i += 5
            elif op == "X":
                n = int(ops[i + 3])
                fields = ops[i + 4 : i + 4 + 2 * n]
                entry = dict(zip(fields[::2], fields[1::2], strict=True))
                self.streams.setdefault(key, []).append((str(ops[i + 2]), entry))
                i += 4 + 2 * n
            else:
                raise AssertionError(op)
        meta[b"applied"] = str(seq).encode()

    def reply(self, command: tuple[Any, ...]) -> Any:
        name, key, *fields = command
        if name == "LRANGE":
            return list(self.lists.get(key, []))
        h = self.hashes.get(key, {})
        if name == "HGETALL":
            return dict(h)
        if name == "HMGET":
            return [h.get(f.encode()) for f in fields]
        if name == "HGET":
            return h.get(fields[0].encode())
        raise AssertionError(name)


def build(ops: list[tuple[Any, ...]]) -> dsh.Session:
    s = dsh.Session.create("p", clock=lambda: 1)
    s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    for op in ops:
        type_, data, surface, cites, *rest = resolve(s, op)
        try:
            s.append(type_, data, surface, cites, ignorable=bool(rest and rest[0]))
        except dsh.ValidationError:
            continue
    return s


def plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


@settings(max_examples=150, deadline=None)
@given(st.lists(operations, max_size=40), st.integers(0, 40))
def test_the_surface_step_matches_the_core_and_resumes_from_its_redis_state(
    ops: list[tuple[Any, ...]], resume_at: int
) -> None:
    s = build(ops)
    keys = Keys("t")
    projections: list[Projection[Any]] = [
        SurfaceProjection(keys, PROJECTIONS),
        TranscriptProjection(keys),
        AuditProjection(keys),
    ]
    redis = FakeRedis()
    states = [p.fresh() for p in projections]
    for ev in s.events():
        if ev.seq == resume_at:  # a restarted process: state comes back from "Redis"
            states = [p.load([redis.reply(c) for c in p.load_reads("p")]) for p in projections]
        for p, state in zip(projections, states, strict=True):
            redis.apply(p.all_keys("p"), ev.seq, p.plan(state, ev))
        core = dsh.Session.from_restore("c", s.events(0, ev.seq + 1), PROJECTIONS)
        surface = states[0]
        assert surface.surface.nodes == core.surface.nodes
        assert surface.surface.replace_generation == core.surface.replace_generation
        assert surface.surface.content_generation == core.surface.content_generation
        assert plain(surface.derive_messages()) == plain(core.derive_messages())
    transcript = redis.streams.get("t:{p}:transcript", [])
    surface_entries = [int(i.split("-")[0]) for i, e in transcript if e["kind"] == "surface"]
    assert surface_entries == [ev.seq for ev in s.transcript()]


@settings(max_examples=150, deadline=None)
@given(st.lists(operations, max_size=40))
def test_the_surface_step_refuses_what_the_core_refuses(ops: list[tuple[Any, ...]]) -> None:
    s = dsh.Session.create("p", clock=lambda: 1, invariants=False)
    s.register_message_projection("image/offload", PROJECTIONS["image/offload"])
    state = SurfaceFold()
    for op in ops:
        type_, data, surface, cites, *rest = resolve(s, op)
        ignorable = bool(rest and rest[0])
        try:
            ev = s.append(type_, data, surface, cites, ignorable=ignorable)
        except InvariantError:
            continue
        except SessionError:
            try:
                candidate = dsh.Event(type_, len(s), 1, data, surface, cites, ignorable)
                wire = candidate.to_json()
                rejected = dsh.Event.from_json(wire)
            except (SessionError, TypeError, ValueError):
                continue  # not even a well-formed event: the codec or envelope refuses it
            before = (state.surface.nodes, state.next_seq)
            try:
                advance(state, rejected, PROJECTIONS)
            except SessionError:
                assert (state.surface.nodes, state.next_seq) == before
                continue
            raise AssertionError(f"the core refused {wire} but the projector applied it") from None
        advance(state, ev, PROJECTIONS)
