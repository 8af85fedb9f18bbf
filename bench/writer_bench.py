"""Writer benchmark: sustained appends/s through one writer with many sessions (append_async,
many in flight), and single-append round trip p50/p99 at a steady 500 appends/s, each next to
the ceiling of a raw transactional confluent-kafka producer measured in the same run. Also the
writer alone: how fast it works through a backlog of commands published before it started
(``--backlog``), with no client in the box competing for the 2 cores.

Run against a broker you started (`dsh up`):
    .venv/bin/python -m bench.writer_bench --bootstrap 127.0.0.1:19092 [--seconds 10]
The writer runs as its own process (`python -m cli writer`), as in production; topics are
created under a fresh prefix so runs never see each other's records. A brand-new partition's
first writes are slow at the broker (hundreds of ms in a fresh topic's first second, measured
2 Dec 2026), so the round trip is counted after ``--warmup`` seconds at the same rate; the
warm-up's own figures are printed apart. The paced phase starts from a synced disk and a
frozen heap, so it measures a steady rate rather than what the phases before it left; its
slowest second is printed beside the machine's stalls in that second (bench/stalls.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.raw_kafka import raw_ceiling
from bench.stack import begin, bench_parser, run_id, start_writer, stop
from bench.workload import message
from bench.writer_backlog import drain, produce_backlog
from bench.writer_metrics import gc_pauses, scrape
from bench.writer_paced import paced_phase
from bench.writer_report import lines
from bench.writer_sustained import sustained_phases
from deploy.local.processes import free_ports
from producers import SessionClient
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings


def parse_args() -> argparse.Namespace:
    parser = bench_parser(__doc__)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--writer-env", action="append", default=[], help="DSH_WRITER_X=value for the writer"
    )
    parser.add_argument("--skip-sustained", action="store_true", help="latency only")
    parser.add_argument(
        "--backlog",
        type=int,
        default=300_000,
        help="events (10 per command) waiting before the writer starts; 0: no drain phase",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="seconds paced at --rate before the counted round trips (reported apart)",
    )
    return parser.parse_args()


def with_writer(
    args: argparse.Namespace, kafka: KafkaSettings, sessions: list[str], backlog: int
) -> dict[str, Any]:
    """The phases with the writer running: the backlog drain, the sustained phases, the paced
    round trips, and the writer's collections over its life."""
    log = Path(f"/tmp/writer-bench-{run_id()[:6]}.log")
    (metrics_port,) = free_ports(1)
    writer = start_writer(
        kafka, f"bench-writer-{run_id()}", metrics_port=metrics_port, extra=args.writer_env, log=log
    )
    results: dict[str, Any] = {}
    try:
        if backlog:
            drained = drain(writer.pid, metrics_port, backlog, 10)
            results["backlog_events"] = backlog
            results["backlog_events_per_s"] = drained["events_per_s"]
            results["backlog_writer_cpu_us_per_event"] = drained["writer_cpu_us_per_event"]
            results["backlog_gc"] = drained["gc"]
        with SessionClient(settings=kafka, timeout=60) as client:
            probe = f"probe-{run_id()[:6]}"
            client.append(probe, "user/message", message(0), surface_op="append")  # writer up
            if not args.skip_sustained:
                results.update(
                    sustained_phases(
                        client, writer.pid, metrics_port, sessions, args.seconds, args.window
                    )
                )
            results.update(
                paced_phase(client, metrics_port, sessions, args.rate, args.seconds, args.warmup)
            )
        # Every collection of the writer's life, start-up to here: an older generation's
        # collection walks the whole long-lived heap and stops the writer for its length.
        results["writer_gc"] = gc_pauses({}, scrape(metrics_port))
    finally:
        stop(writer)
    return results


def main() -> int:
    args = parse_args()
    kafka = begin(args.bootstrap, args.partitions)
    sessions = [f"bench-{i}" for i in range(args.sessions)]
    assert {partition_for(s, args.partitions) for s in sessions} == set(range(args.partitions))
    backlog = 0
    if args.backlog and not args.skip_sustained:
        backlog = produce_backlog(kafka, sessions, args.backlog // 10, 10)
    results: dict[str, Any] = {
        "partitions": args.partitions,
        "sessions": args.sessions,
        "window": args.window,
        "seconds": args.seconds,
    }
    results.update(with_writer(args, kafka, sessions, backlog))
    results["raw"] = raw_ceiling(kafka, args.seconds, args.rate)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("\n".join(lines(results, args.rate, args.warmup)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
