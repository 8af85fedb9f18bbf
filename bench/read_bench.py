"""Read benchmark: what one session's read costs, and whether it grows with its neighbours.

A 100-event session is read from a partition that also holds ``--others`` events of other
sessions (its commands interleaved with theirs, the costly case for a scan), and a same-size
session from a partition holding nothing else. Each is read with ``SessionClient.read`` (the
writer that owns the session answers from memory) and ``SessionClient.read_log`` (a scan of
the partition, for when no writer answers). Beside them, in the same run: the raw ceiling of
a read's round trip, a one-record Kafka transaction with consumed offsets (the writer answers
inside such a transaction).

With ``--redis``, also the surface of the 100-event session from Redis through
``projectors.views.Views`` (a projector process is started), beside a raw pipelined read of
the same keys in one MULTI.

Run against a stack you started (`dsh up`):
    .venv/bin/python -m bench.read_bench --bootstrap 127.0.0.1:19092 --redis redis://127.0.0.1:16379/0
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.figures import p50_p99_ms, timed
from bench.raw_kafka import raw_ceiling
from bench.stack import begin, bench_parser, run_id, start_projector, start_writer, stop
from bench.workload import message, sessions_in
from bench.writer_metrics import scrape
from deploy.local.processes import free_ports
from producers import SessionClient, draft
from projectors.keys import Keys
from projectors.views import Views
from servicekit.settings import KafkaSettings

BUSY, QUIET = 0, 1  # partitions
EVENTS = 100  # of each session read
PER_COMMAND = 10


def fill(client: SessionClient, target: str, others: list[str], per_other: int) -> None:
    """``target``'s events interleaved with every other session's, 10 per command."""
    futures = []
    rounds = max(EVENTS, per_other) // PER_COMMAND
    for r in range(rounds):
        for sid, count in [(target, EVENTS), *[(o, per_other) for o in others]]:
            start = r * PER_COMMAND
            if start >= count:
                continue
            drafts = [
                draft("user/message", message(start + k), surface_op="append")
                for k in range(min(PER_COMMAND, count - start))
            ]
            futures.append(client.append_many_async(sid, drafts))
        if len(futures) > 4000:
            for f in futures:
                f.result()
            futures.clear()
    for f in futures:
        f.result()


def snapshots_written(port: int) -> float:
    return sum(v for k, v in scrape(port).items() if k.startswith("dsh_writer_snapshots_total"))


def settle(client: SessionClient, sid: str, metrics_port: int) -> tuple[float, int]:
    """Until the writer's checkpoint of the busy partition is done. After the fill, every
    batch of that partition (a read's too) carries up to 1 MiB of the snapshots that
    checkpoint owes (``CHECKPOINT_BYTES_PER_BATCH``) until every session is covered; that is
    a cost of the burst, measured here apart, not of a read."""
    started, reads, quiet = time.monotonic(), 0, 0
    before = snapshots_written(metrics_port)
    while quiet < 5:
        client.read(sid)
        reads += 1
        now = snapshots_written(metrics_port)
        quiet = quiet + 1 if now == before else 0
        before = now
    return time.monotonic() - started, reads


def alternated(
    first: Callable[[], Any], second: Callable[[], Any], trials: int
) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    for _ in range(trials):
        a += timed(first, 1)
        b += timed(second, 1)
    return a, b


def figures(samples: list[float]) -> dict[str, float]:
    p50, p99 = p50_p99_ms(samples)
    return {"p50_ms": p50, "p99_ms": p99}


def redis_rows(
    kafka: KafkaSettings, url: str, sid: str, trials: int
) -> dict[str, dict[str, float]]:
    prefix = f"readbench-{run_id()}"
    projector = start_projector(kafka, url, prefix)
    client = redis.Redis.from_url(url)
    keys = Keys(prefix)
    views = Views(client, keys, timeout_s=120)
    try:
        views.surface(sid, at_least=EVENTS - 1)  # the projector has caught up
        assert len(views.surface(sid).messages) == EVENTS

        def raw() -> None:
            pipe = client.pipeline(transaction=True)
            pipe.hgetall(keys.meta("surface", sid))
            pipe.hgetall(keys.session(sid, "surface", "messages"))
            pipe.lrange(keys.session(sid, "surface", "nodes"), 0, -1)
            pipe.execute()

        return {
            "surface from Redis (Views.surface)": figures(
                timed(lambda: views.surface(sid), trials)
            ),
            "surface, at least its last seq": figures(
                timed(lambda: views.surface(sid, at_least=EVENTS - 1), trials)
            ),
            "raw: the same keys in one MULTI": figures(timed(raw, trials)),
        }
    finally:
        stop(projector)
        client.close()


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--others", type=int, default=200_000, help="events of other sessions")
    parser.add_argument("--per-other", type=int, default=100, help="events per other session")
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--scan-trials", type=int, default=5)
    parser.add_argument("--redis", default=None, help="a Redis URL: also the surface read")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    kafka = begin(args.bootstrap, args.partitions)
    (busy,) = sessions_in(BUSY, args.partitions, 1, "busy")
    (quiet,) = sessions_in(QUIET, args.partitions, 1, "quiet")
    others = sessions_in(BUSY, args.partitions, args.others // args.per_other, "other")
    log = Path(f"/tmp/read-bench-{run_id()[:6]}.log")
    metrics_port = free_ports(1)[0]
    writer = start_writer(kafka, f"read-bench-{run_id()}", metrics_port=metrics_port, log=log)
    rows: dict[str, dict[str, float]] = {}
    try:
        with SessionClient(settings=kafka, timeout=120) as client:
            started = time.monotonic()
            fill(client, busy, others, args.per_other)
            fill(client, quiet, [], 0)
            filled_s = time.monotonic() - started
            assert len(client.read(busy)) == len(client.read(quiet)) == EVENTS
            settle_s, settle_reads = settle(client, busy, metrics_port)
            timed(lambda: client.read(quiet), 10)  # warm
            # Alternated, so that a drift of the machine falls on both alike.
            quiet_reads, busy_reads = alternated(
                lambda: client.read(quiet), lambda: client.read(busy), args.trials
            )
            rows["read, alone on its partition"] = figures(quiet_reads)
            rows[f"read, beside {args.others:,} other events"] = figures(busy_reads)
            rows["read_log (scan), alone"] = figures(
                timed(lambda: client.read_log(quiet), args.scan_trials)
            )
            rows[f"read_log (scan), beside {args.others:,}"] = figures(
                timed(lambda: client.read_log(busy), args.scan_trials)
            )
        ceiling = raw_ceiling(kafka, 2.0, 200.0)
        rows["raw: one-record transaction + offsets"] = {
            "p50_ms": round(ceiling["offsets_p50_ms"], 1),
            "p99_ms": round(ceiling["offsets_p99_ms"], 1),
        }
        if args.redis:
            rows.update(redis_rows(kafka, args.redis, busy, args.trials))
    finally:
        stop(writer)
        log.unlink(missing_ok=True)
    alone = rows["read, alone on its partition"]["p50_ms"]
    beside = rows[f"read, beside {args.others:,} other events"]["p50_ms"]
    result: dict[str, Any] = {
        "others": args.others,
        "fill_seconds": round(filled_s, 1),
        "checkpoint_after_fill": {"seconds": round(settle_s, 1), "reads": settle_reads},
        "rows": rows,
        "busy_over_alone_p50": round(beside / alone, 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"a {EVENTS}-event session; its busy partition holds {args.others:,} events of "
        f"{len(others)} other sessions, interleaved (filled in {filled_s:.0f}s; the writer's "
        f"checkpoint of it then took {settle_s:.1f}s, {settle_reads} reads carrying it)"
    )
    for name, r in rows.items():
        print(f"  {name:44s} p50 {r['p50_ms']:8.1f} ms   p99 {r['p99_ms']:8.1f} ms")
    print(f"  read beside the others / read alone (p50): {result['busy_over_alone_p50']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
