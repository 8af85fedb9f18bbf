"""The demo's scripted session on the in-process core: valid, deterministic, and it exercises
what the demo claims (compaction, rewrite, offload, a failed attempt, a fork)."""

from __future__ import annotations

from typing import Any

import dsh
from cli.demo_script import COMPACTED_TURNS, TURNS, Result, fork_turn, run_script
from interpreters import offload_images


def _run() -> tuple[dsh.Session, Result]:
    session = dsh.Session.create("demo", clock=lambda: 0)
    session.register_message_projection("image/offload", offload_images)
    result = run_script(
        lambda t, d, op, src: session.append(t, d, surface_op=op, source_event_seqs=src)
    )
    return session, result


def _wire(session: dsh.Session) -> list[dict[str, Any]]:
    return [e.to_json() for e in session.events()]


def test_the_script_is_valid_and_deterministic() -> None:
    first, result = _run()
    second, _ = _run()
    assert _wire(first) == _wire(second)
    assert result.last_seq == len(first) - 1
    assert result.nodes == list(first.surface.nodes)


def test_the_script_shows_each_feature() -> None:
    session, r = _run()
    types = [e.type for e in session.events()]
    assert types.count("turn/start") == len(TURNS)
    assert session.event(r.failed_attempt_seq).type == "assistant/attempt"
    # The summary replaced every node of turns 1..10 and cites each one.
    summary = session.event(r.summary_seq)
    assert summary.to_json()["sourceEventSeqs"] == r.summarized
    assert set(r.summarized) == {
        s for t in range(1, COMPACTED_TURNS + 1) for s in r.turn_nodes[t] if s != r.nodes[0]
    }
    assert r.summary_seq in session.surface.nodes
    assert not set(r.summarized) & set(session.surface.nodes)
    # The rewrite took the long tool result's place; the offload changed the image message.
    assert r.rewrite_seq in session.surface.nodes
    assert r.rewritten_result_seq not in session.surface.nodes
    image_message = next(
        m for m in session.derive_messages() if m["id"] == session.event(r.image_seq).data["id"]
    )
    assert all(b["type"] != "image" for b in image_message["content"])
    # The human transcript keeps the compacted turns.
    assert {e.seq for e in session.transcript()} >= set(r.summarized)


def test_the_fork_continues_on_its_own() -> None:
    session, _ = _run()
    child = session.fork("demo-fork")
    last = fork_turn(
        lambda t, d, op, src: child.append(t, d, surface_op=op, source_event_seqs=src),
        len(TURNS) + 1,
    )
    assert last == len(child) - 1
    assert child.derive_messages()[:-2] == session.derive_messages()
