"""Agents SDK benchmark: what one SDK turn costs on ``DshAgentsSession``, beside the SDK's own
``RedisSession`` on the same Redis, in the same run.

A turn is what ``Runner`` does with a session around one model call: ``get_items()`` (the
history it sends), then ``add_items([user input, assistant output])``. Each backend runs
``--turns`` turns on one session; the figures are per turn, and the last tenth's median beside
the first tenth's shows whether the cost grows with the session. The raw ceiling of one of our
round trips is measured too: a one-record Kafka transaction with consumed offsets (the writer
answers a read and commits an append inside one); a turn is two such round trips.

Then the length sweep (``bench.agents_sweep``): each call's cost at 0, 1,000, 5,000 and
10,000 messages, beside the SDK's ``RedisSession`` and ``SQLiteSession`` in the same run.

Run against a stack you started (`dsh up`):
    .venv/bin/python -m bench.agents_bench --bootstrap 127.0.0.1:19092 --redis redis://127.0.0.1:16379/0
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from bench.agents_sweep import growth, print_sweep, sweep, turn_items
from bench.figures import p50_p99_ms
from bench.raw_kafka import raw_ceiling
from bench.stack import begin, bench_parser, run_id, start_writer, stop
from producers import SessionClient

_T = TypeVar("_T")


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
    parser.add_argument("--turns", type=int, default=300, help="0: no turns section")
    parser.add_argument(
        "--lengths", default="0,1000,5000,10000", help="the sweep's session lengths; '': none"
    )
    parser.add_argument("--calls", type=int, default=30, help="timed rounds per sweep length")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",") if x]

    from agents.extensions.memory.redis_session import RedisSession
    from agents.memory.sqlite_session import SQLiteSession
    from redis.asyncio import Redis

    from producers.agents_session import DshAgentsSession

    kafka = begin(args.bootstrap, 4)
    log = Path(f"/tmp/agents-bench-{run_id()[:6]}.log")
    writer = start_writer(kafka, f"agents-bench-{run_id()}", log=log)
    rows: dict[str, dict[str, float]] = {}
    sweeps: dict[str, dict[int, dict[str, float]]] = {}
    ours_name, redis_name = "DshAgentsSession", "RedisSession (the SDK's own)"

    async def on_redis(run: Callable[[Any], Awaitable[_T]]) -> _T:
        redis = Redis.from_url(args.redis)
        try:
            theirs = RedisSession(
                f"bench-{run_id()}", redis_client=redis, key_prefix=f"bench-{run_id()}"
            )
            try:
                return await run(theirs)
            finally:
                await theirs.clear_session()
        finally:
            await redis.aclose()

    try:
        with SessionClient(settings=kafka, timeout=60) as client:
            ours = DshAgentsSession(f"agents-bench-{run_id()}", client)
            asyncio.run(turns(ours, 5))  # the writer's first partition writes are slow
            if args.turns:
                rows[ours_name] = figures(
                    asyncio.run(turns(DshAgentsSession(f"agents-{run_id()}", client), args.turns))
                )
            if lengths:
                fresh = DshAgentsSession(f"agents-sweep-{run_id()}", client)
                sweeps[ours_name] = asyncio.run(sweep(fresh, lengths, args.calls))
        if args.turns:
            rows[redis_name] = figures(asyncio.run(on_redis(lambda s: turns(s, args.turns))))
        if lengths:
            sweeps[redis_name] = asyncio.run(on_redis(lambda s: sweep(s, lengths, args.calls)))
            with tempfile.TemporaryDirectory() as tmp:
                sqlite = SQLiteSession(f"bench-{run_id()}", Path(tmp) / "bench.db")
                try:
                    sweeps["SQLiteSession (the SDK's own, a file)"] = asyncio.run(
                        sweep(sqlite, lengths, args.calls)
                    )
                finally:
                    sqlite.close()
        ceiling = raw_ceiling(kafka, 2.0, 200.0)
        rows["raw: one-record transaction + offsets"] = {
            "p50_ms": round(ceiling["offsets_p50_ms"], 1),
            "p99_ms": round(ceiling["offsets_p99_ms"], 1),
        }
    finally:
        stop(writer)
        log.unlink(missing_ok=True)
    raw = rows["raw: one-record transaction + offsets"]["p50_ms"]
    ratio = round(rows[ours_name]["p50_ms"] / raw, 2) if ours_name in rows else None
    result = {
        "turns": args.turns,
        "rows": rows,
        "turn_over_raw_round_trip_p50": ratio,
        "sweep_ms": sweeps,
        "sweep_growth": {name: growth(row) for name, row in sweeps.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if args.turns:
        print(f"{args.turns} turns of get_items + add_items (2 items, ~1 KiB each) on one session")
    for name, r in rows.items():
        grows = (
            f"   first tenth {r['first_tenth_p50_ms']:6.1f} -> last {r['last_tenth_p50_ms']:6.1f}"
            if "first_tenth_p50_ms" in r
            else ""
        )
        print(f"  {name:40s} p50 {r['p50_ms']:7.1f} ms   p99 {r['p99_ms']:7.1f} ms{grows}")
    if ratio is not None:
        print(f"  a DshAgentsSession turn / one raw round trip (p50): {ratio}")
    if sweeps:
        print_sweep(sweeps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
