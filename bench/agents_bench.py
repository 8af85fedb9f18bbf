"""Agents SDK benchmark: what one SDK turn costs on ``DshAgentsSession``, beside the SDK's own
``RedisSession`` on the same Redis, in the same run.

A turn is what ``Runner`` does with a session around one model call: ``get_items()`` (the
history it sends), then ``add_items([user input, assistant output])``. Each backend runs
``--turns`` turns on one session; the figures are per turn, and the last tenth's median beside
the first tenth's shows whether the cost grows with the session. The raw ceiling of one of our
round trips is measured too: a one-record Kafka transaction with consumed offsets (the writer
answers a read and commits an append inside one); a turn is two such round trips.

Run against a stack you started (`dsh up`):
    .venv/bin/python -m bench.agents_bench --bootstrap 127.0.0.1:19092 --redis redis://127.0.0.1:16379/0
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.figures import p50_p99_ms
from bench.raw_kafka import raw_ceiling
from bench.stack import begin, bench_parser, run_id, start_writer, stop
from producers import SessionClient


def turn_items(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A user input and an assistant output message, as the SDK adds them (about 1 KiB)."""
    text = f"turn {n}: " + "words of a plausible length " * 36
    user = {"role": "user", "content": text}
    assistant = {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return user, assistant


async def turns(session: Any, count: int) -> list[float]:
    out = []
    for n in range(count):
        user, assistant = turn_items(n)
        t0 = time.perf_counter()
        await session.get_items()
        await session.add_items([user, assistant])
        out.append(time.perf_counter() - t0)
    items = await session.get_items()
    assert len(items) == 2 * count, len(items)
    return out


def figures(samples: list[float]) -> dict[str, float]:
    p50, p99 = p50_p99_ms(samples)
    tenth = max(2, len(samples) // 10)
    return {
        "p50_ms": p50,
        "p99_ms": p99,
        "first_tenth_p50_ms": round(statistics.median(samples[:tenth]) * 1000, 1),
        "last_tenth_p50_ms": round(statistics.median(samples[-tenth:]) * 1000, 1),
    }


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--redis", default="redis://127.0.0.1:16379/0")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from agents.extensions.memory.redis_session import RedisSession
    from redis.asyncio import Redis

    from producers.agents_session import DshAgentsSession

    kafka = begin(args.bootstrap, 4)
    log = Path(f"/tmp/agents-bench-{run_id()[:6]}.log")
    writer = start_writer(kafka, f"agents-bench-{run_id()}", log=log)
    rows: dict[str, dict[str, float]] = {}
    try:
        with SessionClient(settings=kafka, timeout=60) as client:
            ours = DshAgentsSession(f"agents-bench-{run_id()}", client)
            asyncio.run(turns(ours, 5))  # the writer's first partition writes are slow
            rows["DshAgentsSession"] = figures(
                asyncio.run(turns(DshAgentsSession(f"agents-{run_id()}", client), args.turns))
            )

        async def redis_turns() -> list[float]:
            redis = Redis.from_url(args.redis)
            try:
                theirs = RedisSession(
                    f"bench-{run_id()}", redis_client=redis, key_prefix=f"bench-{run_id()}"
                )
                samples = await turns(theirs, args.turns)
                await theirs.clear_session()
                return samples
            finally:
                await redis.aclose()

        rows["RedisSession (the SDK's own)"] = figures(asyncio.run(redis_turns()))
        ceiling = raw_ceiling(kafka, 2.0, 200.0)
        rows["raw: one-record transaction + offsets"] = {
            "p50_ms": round(ceiling["offsets_p50_ms"], 1),
            "p99_ms": round(ceiling["offsets_p99_ms"], 1),
        }
    finally:
        stop(writer)
        log.unlink(missing_ok=True)
    ratio = round(
        rows["DshAgentsSession"]["p50_ms"]
        / rows["raw: one-record transaction + offsets"]["p50_ms"],
        2,
    )
    result = {"turns": args.turns, "rows": rows, "turn_over_raw_round_trip_p50": ratio}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.turns} turns of get_items + add_items (2 items, ~1 KiB each) on one session")
    for name, r in rows.items():
        growth = (
            f"   first tenth {r['first_tenth_p50_ms']:6.1f} -> last {r['last_tenth_p50_ms']:6.1f}"
            if "first_tenth_p50_ms" in r
            else ""
        )
        print(f"  {name:40s} p50 {r['p50_ms']:7.1f} ms   p99 {r['p99_ms']:7.1f} ms{growth}")
    print(f"  a DshAgentsSession turn / one raw round trip (p50): {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
