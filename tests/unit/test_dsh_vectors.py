"""Replays the reference vectors recorded from DSH (see dsh-vectors/README.md).

Same accept/reject for every attempt; for each final session the same events (ignoring
``time``), nodes, replace generation and derived messages. On-purpose differences follow the
README: invariants only for ``inv-`` sessions; JS-only values (-0, BigInt, sparse holes) and
the file-header checks of DSH's constructor (our ``dsh.formats`` owns headers) are skipped.
"""

from __future__ import annotations

from typing import Any

import pytest

import dsh
from tests.support.dsh_vectors import (
    PINNED,
    SCENARIOS,
    VECTORS,
    Skip,
    decode,
    invariants_of,
    parent_of,
)

pytestmark = pytest.mark.skipif(
    not VECTORS.exists(), reason=f"DSH reference vectors not found at {VECTORS} (set DSH_VECTORS)"
)


def _new(name: str) -> dsh.Session:
    return dsh.Session.create(name, clock=lambda: PINNED, invariants=invariants_of(name))


def _restore(name: str, seed: list[dict[str, Any]]) -> dsh.Session:
    return dsh.Session.from_restore(name, seed, invariants=invariants_of(name))


def _attempt(
    scenario: dict[str, Any], a: dict[str, Any], live: dict[str, dsh.Session]
) -> dsh.Session | None:
    """Run one attempt; returns the session it created (if any). Raises on rejection."""
    op, name = a["op"], a["session"]
    final = scenario["sessions"].get(name)
    if op == "append":
        session = live.get(name) or live.setdefault(name, _new(name))
        options = a.get("options", {})
        data = decode(a["data"])
        ev = session.append(
            a["type"],
            data,
            surface_op=decode(options.get("surfaceOp")),
            source_event_seqs=decode(options.get("sourceEventSeqs")),
        )
        assert ev.seq == a["seq"]
        return None
    if op == "fork":
        boundary = a["boundary"]
        return live[parent_of(scenario, a)].fork(
            name, at=None if boundary is None else boundary + 1
        )
    if op == "Session.create(seed, seeded header, inheritedEventCount)":
        # DSH's seeded constructor is what its store's fork does; ours is Session.fork.
        parent = a["header"]["parentSession"]
        return live[parent].fork(name, at=a["inheritedEventCount"])
    if "header" in op:
        raise Skip("session-file headers belong to dsh.formats")
    if op.startswith(("Session.create(seed", "Session.fromRestore")) and "seedLength" in a:
        assert final is not None
        return _restore(name, final["events"][: a["seedLength"]])
    built = _BAD_SEEDS.get(name)
    if built is None:
        raise Skip(f"no Python counterpart for {op}")
    return _restore(name, built(live))


def _src(live: dict[str, dsh.Session]) -> list[dict[str, Any]]:
    return [e.to_json() for e in live["src"].events()]


def _gap(live: dict[str, dsh.Session]) -> list[dict[str, Any]]:
    seed = _src(live)
    del seed[2]
    return seed


def _envelope(live: dict[str, dsh.Session]) -> list[dict[str, Any]]:
    seed = _src(live)
    seed[0]["bogus"] = 1
    return seed


def _tool_ids(live: dict[str, dsh.Session]) -> list[dict[str, Any]]:
    seed = _src(live)
    seed[5]["data"]["message"]["content"][0]["toolCallId"] = "someone-else"
    return seed


def _coverage(live: dict[str, dsh.Session]) -> list[dict[str, Any]]:
    msg = {"id": "u", "role": "user", "content": [], "source": {"kind": "user"}}
    return [
        {"type": "user/message", "seq": 0, "time": PINNED, "data": msg, "surfaceOp": "append"},
        {"type": "user/message", "seq": 1, "time": PINNED, "data": msg, "surfaceOp": "append"},
        {
            "type": "user/message",
            "seq": 2,
            "time": PINNED,
            "data": msg,
            "surfaceOp": {"op": "replace", "startSeq": 0, "endSeq": 1},
            "sourceEventSeqs": [0],
        },
    ]


_BAD_SEEDS = {
    "seed-gap": _gap,
    "seed-envelope": _envelope,
    "seed-tool-id-mismatch": _tool_ids,
    "seed-surface-violation": _coverage,
}
_SEED_INDEX = {
    "seed-gap": 2,
    "seed-envelope": 0,
    "seed-tool-id-mismatch": 5,
    "seed-surface-violation": 2,
}


def _without_time(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "time"} for e in events]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["scenario"] for s in SCENARIOS])
def test_vector_scenario(scenario: dict[str, Any]) -> None:
    live: dict[str, dsh.Session] = {}
    skipped: list[str] = []
    for i, a in enumerate(scenario["attempts"]):
        where = f"attempt {i} ({a['session']} {a['op']} {a.get('type', '')})"
        try:
            created = _attempt(scenario, a, live)
        except Skip as why:
            skipped.append(f"{where}: {why}")
            continue
        except dsh.SessionError as exc:
            assert not a["ok"], f"{where}: rejected but DSH accepted it: {exc}"
            if a["op"] == "fork":
                assert isinstance(exc, dsh.ForkError) and exc.code == a["error"]["code"], where
            elif a["op"] == "append":
                assert isinstance(exc, dsh.ValidationError), where
            else:
                assert isinstance(exc, dsh.RestoreError), where
                assert exc.index == _SEED_INDEX[a["session"]], f"{where}: {exc}"
            continue
        assert a["ok"], f"{where}: accepted but DSH rejected it: {a['error']['message']}"
        if created is not None:
            live[a["session"]] = created
    for name, expected in scenario["sessions"].items():
        assert name in live, f"session {name} was never built"
        s = live[name]
        got = [e.to_json() for e in s.events()]
        assert _without_time(got) == _without_time(expected["events"]), name
        assert list(s.surface.nodes) == expected["surface"]["nodes"], name
        assert s.surface.replace_generation == expected["surface"]["replaceGeneration"], name
        assert s.derive_messages() == expected["deriveMessages"], name
