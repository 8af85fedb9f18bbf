"""Serve benchmark: `dsh serve` (one uvicorn worker, as `dsh serve` runs) beside
``SessionClient`` and ``Views`` in the same run.

- Appends: HTTP append round trip p50/p99 at a constant ``--rate`` (vegeta, open loop: each
  request timed from its scheduled start) beside ``SessionClient.append_async`` at the same
  rate, alternated over ``--rounds``. Target: each ≤ the client's + 3 ms.
- Reads: surface reads/s of the one worker (vegeta from ``--read-workers`` connections, as fast
  as they go) beside ``Views.surface`` in a loop on one thread, of a 100-message surface.
- Fan-out: ``--tails`` transcript streams open on one session, then ``--fanout-appends``
  appends at ``--fanout-rate``/s: append to delivery at each tail, p50/p99.

With ``--profile FILE``, one more HTTP round runs with py-spy sampling the server (its stacks
to FILE), and the frames it spends most samples in are printed: where the time goes.

The load tool, vegeta, is installed on first use with ``go install`` (a pinned version) into
the ignored .state/tools/bin. Run against a stack you started (`dsh up --no-services`):
    .venv/bin/python -m bench.serve_bench --bootstrap 127.0.0.1:19092 --redis redis://127.0.0.1:16379/0
The writer, a surface and a transcript projector and `dsh serve` run as processes of their
own, on topics and keys of this run's own.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import redis

from bench.profiling import profile
from bench.serve_phases import appends, fanout, http_appends, reads
from bench.stack import (
    begin,
    bench_parser,
    run_id,
    start_projector,
    start_serve,
    start_writer,
    stop,
)
from bench.vegeta import vegeta
from bench.workload import message
from deploy.local.processes import free_ports
from producers import SessionClient, draft
from projectors.keys import Keys
from projectors.views import Views

SURFACE_MESSAGES = 100
MARGIN_MS = 3.0  # issue 23's target: HTTP ≤ the client's round trip + 3 ms


def wait_ready(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"dsh serve was not ready at {url} within {timeout_s:.0f}s")
        time.sleep(0.5)


def fill_surface(client: SessionClient, views: Views, session_id: str) -> None:
    for start in range(0, SURFACE_MESSAGES, 10):
        drafts = [draft("user/message", message(start + k), surface_op="append") for k in range(10)]
        client.append_many(session_id, drafts)
    views.surface(session_id, at_least=SURFACE_MESSAGES - 1, timeout_s=60)


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """Medians over the rounds, and the ratios and margins the docs quote."""
    out: dict[str, Any] = {}
    appended = results["appends"]
    for q in ("p50_ms", "p99_ms"):
        native = median([r[q] for r in appended["session_client"]])
        http = median([r[q] for r in appended["http"]])
        out[f"append_{q}"] = {
            "http": round(http, 2),
            "session_client": round(native, 2),
            "http_minus_client_ms": round(http - native, 2),
            "ratio": round(http / native, 2),
            "met": http <= native + MARGIN_MS,
        }
    out["serve_cpu_ms_per_append"] = round(median(appended["serve_cpu_ms_per_append"]), 2)
    read = results["reads"]
    http_reads, views_reads = median(read["http_per_s"]), median(read["views_per_s"])
    out["reads_per_s"] = {
        "http": round(http_reads),
        "views": round(views_reads),
        "ratio": round(http_reads / views_reads, 2),
        "serve_cpu_ms_per_read": round(median(read["serve_cpu_ms_per_read"]), 2),
    }
    return out


def lines(results: dict[str, Any]) -> list[str]:
    s = results["summary"]
    out = [f"dsh serve's log: {results['serve_log']}"]
    out.append(f"appends at {results['rate']:g}/s, medians of {results['rounds']} rounds:")
    for q in ("p50_ms", "p99_ms"):
        a = s[f"append_{q}"]
        out.append(
            f"  {q[:3]}: HTTP {a['http']:.1f} ms, SessionClient {a['session_client']:.1f} ms "
            f"(+{a['http_minus_client_ms']:.1f} ms, {a['ratio']:.2f}x) "
            f"target +{MARGIN_MS:g} ms: {'met' if a['met'] else 'missed'}"
        )
    out.append(f"  dsh serve's CPU per HTTP append: {s['serve_cpu_ms_per_append']} ms")
    r = s["reads_per_s"]
    out.append(
        f"surface reads/s ({SURFACE_MESSAGES} messages): HTTP {r['http']:,} (one worker, "
        f"{r['serve_cpu_ms_per_read']} ms CPU a read), Views.surface {r['views']:,} "
        f"(one thread), ratio {r['ratio']}"
    )
    if "fanout" in results:
        f = results["fanout"]
        out.append(
            f"fan-out: {f['tails']} tails (opened in {f['open_s']:.1f} s), {f['appends']} "
            f"appends: delivered {f['delivered']}/{f['expected']}, append to delivery p50 "
            f"{f['delivery_p50_ms']:.1f} ms p99 {f['delivery_p99_ms']:.1f} ms, to the last "
            f"tail p50 {f['all_tails_p50_ms']:.1f} ms; the appends' ack p50 "
            f"{f['ack_p50_ms']:.1f} ms p99 {f['ack_p99_ms']:.1f} ms"
        )
    if "profile" in results:
        out.append(f"dsh serve's samples during one more HTTP round at {results['rate']:g}/s:")
    for frame, share in results.get("profile", []):
        out.append(f"  {share:6.1%}  {frame}")
    return out


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--redis", default="redis://127.0.0.1:16379/0")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--read-seconds", type=float, default=5.0)
    parser.add_argument("--read-workers", type=int, default=16)
    parser.add_argument("--tails", type=int, default=1000, help="0: no fan-out phase")
    parser.add_argument("--fanout-appends", type=int, default=20)
    parser.add_argument("--fanout-rate", type=float, default=2.0)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy's stacks to this file")
    parser.add_argument(
        "--serve-workers",
        type=int,
        default=1,
        help="DSH_SERVE_WORKERS (above 1 the CPU per read counts only the parent process)",
    )
    parser.add_argument(
        "--serve-env",
        action="append",
        default=[],
        metavar="DSH_SERVE_X=VALUE",
        help="another setting of dsh serve (repeatable)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    vegeta()  # built before anything starts, so that its build is not measured
    kafka = begin(args.bootstrap, args.partitions)
    prefix = f"servebench-{run_id()}"
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    writer = start_writer(kafka, f"serve-bench-{run_id()}")
    projectors = [start_projector(kafka, args.redis, prefix, p) for p in ("surface", "transcript")]
    # Its log is kept (a failed stream or request leaves its traceback there), and named.
    log = Path(f"/tmp/serve-bench-{run_id()[:6]}.log")
    streams = {
        "DSH_SERVE_MAX_STREAMS": str(max(args.tails, 1) + 10),
        "DSH_SERVE_WORKERS": str(args.serve_workers),
        **dict(item.partition("=")[::2] for item in args.serve_env),
    }
    serve = start_serve(kafka, args.redis, prefix, port, streams, log)
    store = redis.Redis.from_url(args.redis)
    views = Views(store, Keys(prefix), timeout_s=60)
    results: dict[str, Any] = {
        "rate": args.rate,
        "rounds": args.rounds,
        "serve_log": str(log),
        "serve_workers": args.serve_workers,
    }
    try:
        wait_ready(url)
        sessions = [f"serve-bench-{i}" for i in range(args.sessions)]
        with SessionClient(settings=kafka, timeout=60) as client:
            client.append(f"probe-{run_id()}", "user/message", message(0), surface_op="append")
            results["appends"] = appends(
                client, url, serve.pid, sessions, args.rate, args.seconds, args.warmup, args.rounds
            )
            if args.profile:
                results["profile"] = profile(
                    serve.pid,
                    args.profile,
                    lambda: http_appends(url, sessions, args.rate, args.seconds),
                )
            read_session = f"surface-{run_id()}"
            fill_surface(client, views, read_session)
            results["reads"] = reads(
                views,
                url,
                read_session,
                serve.pid,
                args.read_seconds,
                args.rounds,
                args.read_workers,
            )
            if args.tails:
                results["fanout"] = fanout(
                    client,
                    url,
                    f"fanout-{run_id()}",
                    args.tails,
                    args.fanout_appends,
                    args.fanout_rate,
                )
    finally:
        stop(serve, *projectors, writer)
        store.close()
    results["summary"] = summary(results)
    print(json.dumps(results, indent=2) if args.json else "\n".join(lines(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
