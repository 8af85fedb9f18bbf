"""Core (dsh/) benchmark: append rate, append cost vs log length, incremental derive, restore.

Run: .venv/bin/python bench/core_bench.py [--runs 5] [--quick]
Not a test: it prints medians over several runs and whether each target is met. Times are
process CPU time (``time.process_time``), so other load on a shared machine does not count;
CPython's cycle collector runs with its default settings and is part of the cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import dsh

TEXT = "The quick brown fox jumps over the lazy dog. " * 6


def user_message(i: int) -> dict[str, Any]:
    # ~1 KB of JSON: three text blocks, like a prompt with injected context.
    return {
        "id": f"m-{i}",
        "role": "user",
        "content": [{"type": "text", "text": TEXT} for _ in range(3)],
        "source": {"kind": "user"},
    }


def turn_events(turn: int) -> Iterator[tuple[str, dict[str, Any], Any, Any]]:
    """One realistic turn: prompt, a step with a tool call and result, a final answer."""
    call = f"call-{turn}"
    model = {"kind": "model", "provider": "mock", "model": "mock-1"}
    yield "turn/start", {"turn": turn}, None, None
    yield "user/message", user_message(turn), "append", None
    yield "step/start", {"turn": turn, "step": 1}, None, None
    yield (
        "assistant/message",
        {
            "turn": turn,
            "step": 1,
            "message": {
                "id": f"a-{turn}-1",
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool-call", "id": call, "name": "ls", "arguments": "{}"},
                ],
                "source": model,
            },
            "stream": [{"t": 0, "kind": "text", "text": "checking"}],
        },
        "append",
        None,
    )
    yield (
        "tool/call",
        {"turn": turn, "step": 1, "callId": call, "name": "ls", "arguments": "{}"},
        None,
        None,
    )
    yield (
        "tool/result",
        {
            "turn": turn,
            "step": 1,
            "message": {
                "id": f"r-{turn}",
                "role": "user",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call,
                        "content": [{"type": "text", "text": "a.txt b.txt"}],
                        "isError": False,
                    }
                ],
                "source": {"kind": "tool", "callId": call},
            },
        },
        "append",
        "call",
    )
    yield "step/end", {"turn": turn, "step": 1}, None, None
    yield "turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None, None


def build(n_events: int) -> dsh.Session:
    s = dsh.Session.create("bench")
    turn = 0
    while len(s) < n_events:
        turn += 1
        call_seq = -1
        for type_, data, op, sources in turn_events(turn):
            ev = s.append(type_, data, op, [call_seq] if sources else None)
            if type_ == "tool/call":
                call_seq = ev.seq
    return s


def open_turn(s: dsh.Session) -> None:
    last_turn = s.turns.last_turn
    s.append("turn/start", {"turn": last_turn + 1})


def caller_messages(n: int) -> list[dict[str, Any]]:
    # A caller's data is transient (decoded from a command, appended, dropped); a pool of 100
    # plain dicts, each copied afresh by every append, keeps the benchmark heap like a writer's
    # instead of holding n inputs alive for the cycle collector to rescan.
    pool = [user_message(i) for i in range(100)]
    return [pool[i % 100] for i in range(n)]


def append_rate(n: int) -> float:
    s = dsh.Session.create("bench")
    open_turn(s)
    msgs = caller_messages(n)
    t0 = time.process_time()
    for m in msgs:
        s.append("user/message", m, "append")
    return n / (time.process_time() - t0)


def append_cost(s: dsh.Session, n: int) -> float:
    """Microseconds per 1 KB append onto ``s`` (which already has an open turn)."""
    msgs = caller_messages(n)
    t0 = time.process_time()
    for m in msgs:
        s.append("user/message", m, "append")
    return (time.process_time() - t0) / n * 1e6


def median_of(runs: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(runs))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = p.parse_args()
    runs = args.runs
    big = 10_000 if args.quick else 100_000

    rate = median_of(runs, lambda: append_rate(20_000))

    small = build(100)
    large = build(big)
    open_turn(small)
    open_turn(large)
    cost_small = median_of(runs, lambda: append_cost(small, 2_000))
    cost_large = median_of(runs, lambda: append_cost(large, 2_000))

    nodes = dsh.Session.create("nodes", invariants=False)
    for i in range(big):
        nodes.append("user/message", user_message(i), "append")
    events = nodes.events()

    def cold() -> float:
        fresh = dsh.Session.from_restore("n", events, invariants=False)
        t0 = time.process_time()
        fresh.derive_messages()
        return time.process_time() - t0

    def warm() -> float:
        nodes.derive_messages()
        nodes.append("user/message", user_message(0), "append")
        t0 = time.process_time()
        nodes.derive_messages()
        return time.process_time() - t0

    t_cold = median_of(runs, cold)
    t_warm = median_of(runs, warm)

    log = build(big).events()
    wire = [e.to_json() for e in log]
    decoded = [dsh.Event.from_json(w) for w in wire]  # as a codec hands them over: not yet vetted
    as_json = [json.dumps(w) for w in wire]

    def restore_rate() -> float:
        t0 = time.process_time()
        dsh.Session.from_restore("r", log)
        return len(log) / (time.process_time() - t0)

    def restore_decoded_rate() -> float:
        fresh = [dsh.Event.from_json(w) for w in wire[:1]] + decoded[1:]
        t0 = time.process_time()
        dsh.Session.from_restore("r", fresh)
        return len(fresh) / (time.process_time() - t0)

    def restore_wire_rate() -> float:
        t0 = time.process_time()
        dsh.Session.from_restore("r", wire)
        return len(wire) / (time.process_time() - t0)

    def restore_json_rate() -> float:
        t0 = time.process_time()
        dsh.Session.from_restore("r", [json.loads(line) for line in as_json])
        return len(as_json) / (time.process_time() - t0)

    r_events = median_of(runs, restore_rate)
    r_decoded = median_of(1, restore_decoded_rate)  # once: restore vets these Events
    r_wire = median_of(runs, restore_wire_rate)
    r_json = median_of(runs, restore_json_rate)

    rows = [
        ("append 1 KB user/message", f"{rate:,.0f} /s", ">= 50,000 /s", rate >= 50_000),
        ("append cost at 100 events", f"{cost_small:.1f} us", "", None),
        (f"append cost at {big:,} events", f"{cost_large:.1f} us", "", None),
        (
            f"  ratio {big:,} / 100",
            f"{cost_large / cost_small:.2f}x",
            "<= 1.2x",
            cost_large / cost_small <= 1.2,
        ),
        (f"cold derive, {big:,} nodes", f"{t_cold * 1e3:.2f} ms", "", None),
        (f"derive after 1 append, {big:,} nodes", f"{t_warm * 1e3:.3f} ms", "", None),
        ("  warm / cold", f"{t_warm / t_cold:.1%}", "<= 2%", t_warm / t_cold <= 0.02),
        (
            f"restore {len(log):,} vetted Events",
            f"{r_events:,.0f} ev/s",
            ">= 200,000 ev/s",
            r_events >= 200_000,
        ),
        (
            f"restore {len(log):,} decoded Events",
            f"{r_decoded:,.0f} ev/s",
            ">= 200,000 ev/s",
            r_decoded >= 200_000,
        ),
        (f"restore {len(log):,} wire dicts", f"{r_wire:,.0f} ev/s", "(parse + snapshot)", None),
        (f"restore {len(log):,} JSON lines", f"{r_json:,.0f} ev/s", "(json.loads too)", None),
    ]
    print(f"core bench, medians of {runs} runs")
    print(f"| {'measure':<38} | {'median':>16} | {'target':<18} | met |")
    print(f"|{'-' * 40}|{'-' * 18}|{'-' * 20}|-----|")
    for name, value, target, met in rows:
        mark = "" if met is None else ("yes" if met else "NO")
        print(f"| {name:<38} | {value:>16} | {target:<18} | {mark:<3} |")


if __name__ == "__main__":
    main()
