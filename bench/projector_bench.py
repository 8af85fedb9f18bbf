"""Projector benchmark: events/s applied per projector process next to a raw pipelined Redis
write of the same keys; replay rate; latency from a committed event to a visible surface; and
from a client's append to the visible surface (``end_to_end``), whose slowest second is
reported beside the machine's stalls in it (bench/stalls.py).

Runs against a stack you already run (``dsh up``); every run uses its own topic prefix and
Redis key prefix, and deletes its keys at the end.

    .venv/bin/python -m bench.projector_bench --bootstrap 127.0.0.1:19092 \
        --redis-url redis://127.0.0.1:16379/0
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import SecretStr

import dsh
from bench.commit_latency import latency
from bench.end_to_end import SLOW_MS, end_to_end
from bench.figures import p50_p99_ms
from bench.projector_replay import PROJECTIONS, large_replays, replay_rate, replay_rates
from bench.projector_throughput import publish, throughput
from bench.raw_redis import raw_write
from bench.stack import begin, bench_parser
from bench.stalls import describe, slowest_second
from bench.workload import interleaved, session
from schemas import native
from servicekit.settings import KafkaSettings, RedisSettings


def parse_args() -> argparse.Namespace:
    parser = bench_parser(__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16379/0")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--skip-end-to-end", action="store_true", help="no writer in the loop")
    parser.add_argument("--only-end-to-end", action="store_true")
    parser.add_argument(
        "--client-linger-ms",
        type=float,
        default=5.0,
        help="SessionClient(linger_ms=…) of the end-to-end part's client",
    )
    parser.add_argument(
        "--writer-env",
        action="append",
        default=[],
        help="DSH_WRITER_X=value for the end-to-end part's writer",
    )
    parser.add_argument(
        "--replay-copies",
        type=int,
        default=5,
        help="also time replays of a topic holding this many copies of the workload (a replay's "
        "fixed start-up, ~0.1-0.2 s, is a fifth of one over 40,000 records); 0: skip",
    )
    return parser.parse_args()


def from_a_topic(
    args: argparse.Namespace,
    kafka: KafkaSettings,
    redis_settings: RedisSettings,
    sessions: list[dsh.Session],
    values: list[tuple[str, bytes]],
) -> dict[str, Any]:
    """The workload published to a topic, then applied by each projection (beside the raw
    write of the same keys) and replayed."""
    out: dict[str, Any] = {}
    publish(kafka, values)
    for name in PROJECTIONS:
        rate, cpu = throughput(kafka, redis_settings, name, len(values))
        out[f"{name}_events_per_s"] = round(rate)
        out[f"{name}_cpu_us_per_event"] = round(cpu * 1e6, 1)
        out[f"{name}_raw_redis_events_per_s"] = round(
            raw_write(kafka, redis_settings, name, values)
        )
    out.update(replay_rates(kafka, redis_settings, ""))
    out["replay_all_three_records_per_s"] = round(replay_rate(kafka, redis_settings, PROJECTIONS))
    if args.replay_copies > 1:
        out.update(
            large_replays(
                args.bootstrap, args.partitions, args.replay_copies, redis_settings, sessions
            )
        )
    return out


def with_a_writer(args: argparse.Namespace, kafka: KafkaSettings) -> dict[str, Any]:
    """The end-to-end part at 1,000 appends/s."""
    timed, acked, pressure, client_gc = end_to_end(
        kafka,
        args.redis_url,
        1000,
        args.latency_seconds,
        args.partitions,
        client_linger_ms=args.client_linger_ms,
        writer_env=args.writer_env,
    )
    out: dict[str, Any] = {}
    if acked:
        out["e2e_client_ack_p50_ms"], out["e2e_client_ack_p99_ms"] = p50_p99_ms(acked)
    out["e2e_client_gc_by_generation"] = client_gc.by_generation
    out["e2e_client_gc_longest_ms"] = round(client_gc.longest_ms, 1)
    if timed:
        worst = slowest_second([(t, s * 1000) for t, s in timed], pressure, SLOW_MS)
        out["e2e_slowest_second"] = describe(worst, SLOW_MS)
        out["e2e_samples"] = len(timed)
        out["e2e_p50_ms"], out["e2e_p99_ms"] = p50_p99_ms([seconds for _, seconds in timed])
    return out


def main() -> None:
    args = parse_args()
    kafka = begin(args.bootstrap, args.partitions)
    redis_settings = RedisSettings(url=SecretStr(args.redis_url))
    if args.only_end_to_end:
        args.sessions = 0
    sessions = [session(f"s{i}", args.turns) for i in range(args.sessions)]
    values = interleaved(sessions)
    out: dict[str, Any] = {"events": len(values), "sessions": args.sessions}
    out["codec_native"] = native.available()
    if values:
        out.update(from_a_topic(args, kafka, redis_settings, sessions, values))
    lat = [] if args.only_end_to_end else latency(kafka, args.redis_url, 1000, args.latency_seconds)
    if lat:
        out["latency_samples"] = len(lat)
        out["latency_p50_ms"], out["latency_p99_ms"] = p50_p99_ms(lat)
    if not args.skip_end_to_end:
        out.update(with_a_writer(args, kafka))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
