"""Surface read benchmark: reading the whole surface of a 10,000-message session, each way a
service can, beside the Agents SDK's own ``SQLiteSession.get_items()`` of the same items.

The session is written through ``DshAgentsSession.add_items`` (``--messages`` items, user and
assistant alternating, ~1 KiB each, 100 per call) and projected to Redis by a surface
projector; the same items go into a ``SQLiteSession`` (a file). Then, alternated, ``--calls``
times each: ``get_items()`` of a ``DshAgentsSession`` that read the session before (it reads
only what came since), of a new one (the first read of a process: the whole session from the
writer), ``Views.surface(...).messages`` from Redis, and ``SQLiteSession.get_items()``.
Medians, and each against SQLite's.

Run against a stack you started (`dsh up --no-services`):
    .venv/bin/python -m bench.surface_read --redis redis://127.0.0.1:16379/0
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis

from bench.agents_sweep import turn_items
from bench.stack import begin, bench_parser, run_id, start_projector, start_writer, stop
from producers import SessionClient
from projectors.keys import Keys
from projectors.views import Views

PER_CALL = 100


def items(count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(count // 2):
        out += turn_items(n)
    return out


async def fill(session: Any, all_items: list[dict[str, Any]]) -> None:
    for i in range(0, len(all_items), PER_CALL):
        await session.add_items(all_items[i : i + PER_CALL])


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--redis", default="redis://127.0.0.1:16379/0")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()

    from agents.memory.sqlite_session import SQLiteSession

    from producers.agents_session import DshAgentsSession

    kafka = begin(args.bootstrap, 2)
    prefix = f"surface-bench-{run_id()}"
    writer = start_writer(kafka, f"{prefix}-writer")
    projector = start_projector(kafka, args.redis, prefix)
    all_items = items(args.messages)
    sid = f"{prefix}-s"
    r = redis.Redis.from_url(args.redis)
    try:
        with (
            SessionClient(settings=kafka, timeout=120) as client,
            tempfile.TemporaryDirectory() as tmp,
        ):
            warm = DshAgentsSession(sid, client)
            asyncio.run(fill(warm, all_items))
            sqlite = SQLiteSession(f"bench-{run_id()}", Path(tmp) / "bench.db")
            asyncio.run(fill(sqlite, all_items))
            last = len(client.read(sid)) - 1
            views = Views(r, Keys(prefix), timeout_s=300)
            assert len(views.surface(sid, at_least=last).messages) == args.messages

            async def warm_read() -> Any:
                return await warm.get_items()

            async def first_read() -> Any:
                return await DshAgentsSession(sid, client).get_items()

            async def views_read() -> Any:
                return views.surface(sid).messages

            ways: dict[str, Callable[[], Awaitable[Any]]] = {
                "DshAgentsSession.get_items(), read before": warm_read,
                "DshAgentsSession.get_items(), first read": first_read,
                "Views.surface().messages (Redis)": views_read,
                "SQLiteSession.get_items() (the SDK's own, a file)": sqlite.get_items,
            }
            samples: dict[str, list[float]] = {name: [] for name in ways}

            async def rounds() -> None:
                for name, call in ways.items():  # one untimed call each first
                    assert len(await call()) == args.messages, name
                for _ in range(args.calls):
                    for name, call in ways.items():
                        t0 = time.perf_counter()
                        await call()
                        samples[name].append(time.perf_counter() - t0)

            asyncio.run(rounds())
            sqlite.close()
    finally:
        stop(projector, writer)
        r.close()
    sqlite_ms = median_ms(samples["SQLiteSession.get_items() (the SDK's own, a file)"])
    result = {
        name: {"p50_ms": median_ms(s), "vs_sqlite": round(median_ms(s) / sqlite_ms, 2)}
        for name, s in samples.items()
    }
    print(json.dumps({"messages": args.messages, "calls": args.calls, "reads": result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
