"""Issue 26's targets for the writer, each beside the raw ceiling of the same run: one append
at a time (round trip p50/p99 ÷ a raw one-record transaction with offsets, one after another),
one session pipelined (events/s with ``--window`` appends in flight), and the aggregate of many
sessions through the writer and the three projectors (events/s from the first append to the
last event applied by all three).

Messages are ~1 KiB, alternating ``user/message`` and ``assistant/message``, in sessions
without turn invariants (the messages alone, as an SDK session keeps them). The sequential and
pipelined phases run once per ``--client-linger`` value, alternated with the raw ceiling, so
each figure has a ceiling measured next to it. Run against a broker and Redis you started
(`dsh up --no-services`):

    .venv/bin/python -m bench.writer_targets --bootstrap 127.0.0.1:19092 \\
        --redis-url redis://127.0.0.1:16379/0 [--runs 3] [--only sequential,pipelined,aggregate]
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

import redis

from bench.figures import percentile
from bench.raw_kafka import one_record_transactions
from bench.redis_keys import delete_prefix
from bench.stack import (
    begin,
    bench_parser,
    cpu_seconds,
    run_id,
    start_projector,
    start_writer,
    stop,
)
from bench.writer_metrics import phase_means_ms, scrape
from deploy.local.processes import free_ports
from producers import SessionClient, draft
from projectors.keys import Keys
from servicekit.settings import KafkaSettings

TEXT = "All work and no play makes Jack a dull boy. " * 22  # ~1 KiB of text per message
MODEL = {"kind": "model", "provider": "mock", "model": "m1"}
TARGETS = ("sequential", "pipelined", "aggregate")
PROJECTIONS = ("surface", "transcript", "audit")


def message_draft(i: int) -> dict[str, Any]:
    """The i-th message of a conversation: even ones the user's, odd ones the assistant's."""
    if i % 2 == 0:
        user: dict[str, Any] = {
            "id": f"u{i}",
            "role": "user",
            "content": [{"type": "text", "text": TEXT}],
            "source": {"kind": "user"},
        }
        return draft("user/message", user, surface_op="append")
    message = {
        "id": f"a{i}",
        "role": "assistant",
        "content": [{"type": "text", "text": TEXT}],
        "source": MODEL,
    }
    body = {"turn": 1, "step": 1, "stream": [], "message": message}
    return draft("assistant/message", body, surface_op="append")


def append(client: SessionClient, sid: str, i: int) -> Future[Any]:
    d = message_draft(i)
    return client.append_async(
        sid, d["type"], d["data"], surface_op=d["surfaceOp"], invariants=False
    )


def round_robin(client: SessionClient, sessions: list[str], i: int) -> Future[Any]:
    """The i-th append of many sessions in turn, after each session's first."""
    return append(client, sessions[i % len(sessions)], 1 + i // len(sessions))


def sequential(client: SessionClient, sid: str, seconds: float) -> list[float]:
    """One append at a time for ``seconds``: each round trip in ms."""
    out = []
    i = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        append(client, sid, i).result()
        out.append((time.perf_counter() - t0) * 1000)
        i += 1
    return out


def windowed(submit: Callable[[int], Future[Any]], total: int, window: int) -> float:
    """Events/s of ``total`` submits with ``window`` in flight, from the first submit to the
    last answer."""
    slots = threading.Semaphore(window)
    errors: list[BaseException] = []

    def done(fut: Future[Any]) -> None:
        exc = fut.exception()
        if exc is not None:
            errors.append(exc)
        slots.release()

    start = time.perf_counter()
    for i in range(total):
        slots.acquire()
        submit(i).add_done_callback(done)
    for _ in range(window):
        slots.acquire()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return total / elapsed


class Writer:
    """A writer process on topics of its own, and a client of each ``linger``."""

    def __init__(self, kafka: KafkaSettings, env: list[str], lingers: list[float]) -> None:
        (self.port,) = free_ports(1)
        log = Path(f"/tmp/writer-targets-{run_id()[:6]}.log")
        self.process = start_writer(
            kafka, f"bench-wt-{run_id()}", metrics_port=self.port, extra=env, log=log
        )
        self.clients = {
            linger: SessionClient(settings=kafka, timeout=120, linger_ms=linger)
            for linger in lingers
        }
        for client in self.clients.values():
            append(client, f"warm-{run_id()}", 0).result(60)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        stop(self.process)


def sequential_and_pipelined(
    kafka: KafkaSettings, args: Any, only: set[str], out: dict[str, list[float]]
) -> None:
    writer = Writer(kafka, args.writer_env, args.client_linger)
    try:
        for run in range(args.runs):
            for linger, client in writer.clients.items():
                if "sequential" in only:
                    before = scrape(writer.port)
                    lat = sequential(client, f"seq-{run_id()}", args.seconds)
                    phases = phase_means_ms(before, scrape(writer.port))
                    raw = one_record_transactions(kafka, args.seconds)
                    p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
                    r50, r99 = percentile(raw, 0.5), percentile(raw, 0.99)
                    print(
                        f"run {run}, client linger {linger:g} ms: one at a time p50 {p50:.2f} "
                        f"p99 {p99:.2f} ms; raw transaction + offsets p50 {r50:.2f} p99 "
                        f"{r99:.2f} ms; ratio {p50 / r50:.2f} / {p99 / r99:.2f}; writer means "
                        + ", ".join(f"{k} {v:.2f}" for k, v in phases.items() if v),
                        flush=True,
                    )
                    for key, value in (
                        ("p50 ms", p50),
                        ("p99 ms", p99),
                        ("raw p50 ms", r50),
                        ("raw p99 ms", r99),
                        ("ratio p50", p50 / r50),
                        ("ratio p99", p99 / r99),
                    ):
                        out.setdefault(f"sequential, linger {linger:g}: {key}", []).append(value)
                if "pipelined" in only:
                    sid = f"pipe-{run_id()}"
                    cpu = cpu_seconds(writer.process.pid)
                    mine = time.process_time()
                    rate = windowed(
                        partial(append, client, sid), args.pipelined_events, args.window
                    )
                    writer_us = (cpu_seconds(writer.process.pid) - cpu) / args.pipelined_events
                    client_us = (time.process_time() - mine) / args.pipelined_events
                    print(
                        f"run {run}, client linger {linger:g} ms: one session pipelined "
                        f"{rate:,.0f} events/s; CPU per event: writer {writer_us * 1e6:.0f} µs, "
                        f"client {client_us * 1e6:.0f} µs",
                        flush=True,
                    )
                    out.setdefault(f"pipelined, linger {linger:g}: events/s", []).append(rate)
                    for who, us in (("writer", writer_us), ("client", client_us)):
                        key = f"pipelined, linger {linger:g}: {who} CPU µs/event"
                        out.setdefault(key, []).append(us * 1e6)
    finally:
        writer.close()


def applied_everywhere(client: redis.Redis, prefix: str, sessions: list[str], last: int) -> bool:
    """Whether each projection applied seq ``last`` of every session."""
    script = client.register_script(
        "local n = 0 for _, k in ipairs(KEYS) do "
        "if tonumber(redis.call('HGET', k, 'applied') or '-1') >= tonumber(ARGV[1]) "
        "then n = n + 1 end end return n"
    )
    keys = [Keys(prefix).meta(name, sid) for sid in sessions for name in PROJECTIONS]
    return int(script(keys=keys, args=[last])) == len(keys)


def aggregate(kafka: KafkaSettings, args: Any, out: dict[str, list[float]]) -> None:
    """``--sessions`` sessions, ``--window`` appends in flight over them, through the writer
    and the three projectors: events/s until the projectors applied the last one."""
    per_session = args.aggregate_events // args.sessions
    for run in range(args.runs):
        prefix = f"bench-{run_id()}"
        fresh = begin(kafka.bootstrap_servers, args.partitions)
        projectors = [start_projector(fresh, args.redis_url, prefix, p) for p in PROJECTIONS]
        writer = Writer(fresh, args.writer_env, [args.client_linger[-1]])
        store = redis.Redis.from_url(args.redis_url)
        sessions = [f"agg-{run_id()}-{i}" for i in range(args.sessions)]
        try:
            (client,) = writer.clients.values()
            for sid in sessions:  # every partition owned, every projector joined
                append(client, sid, 0).result(60)
            deadline = time.monotonic() + 120
            while not applied_everywhere(store, prefix, sessions, 0):
                if time.monotonic() > deadline:
                    raise TimeoutError("the projectors did not start")
                time.sleep(0.1)
            total = per_session * len(sessions)
            start = time.perf_counter()
            written = windowed(partial(round_robin, client, sessions), total, args.window)
            while not applied_everywhere(store, prefix, sessions, per_session):
                time.sleep(0.02)
            rate = total / (time.perf_counter() - start)
        finally:
            writer.close()
            stop(*projectors)
            delete_prefix(store, prefix)
        print(
            f"run {run}: {len(sessions)} sessions, aggregate through the writer "
            f"{written:,.0f} events/s, and the three projectors {rate:,.0f} events/s",
            flush=True,
        )
        out.setdefault("aggregate: written events/s", []).append(written)
        out.setdefault("aggregate: applied by all three events/s", []).append(rate)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16379/0")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="of each sequential run")
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--pipelined-events", type=int, default=20_000)
    parser.add_argument("--aggregate-events", type=int, default=60_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--client-linger",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[0.0],
        help="the client's linger_ms, comma-separated for several",
    )
    parser.add_argument("--only", default=",".join(TARGETS))
    parser.add_argument(
        "--writer-env", action="append", default=[], help="DSH_WRITER_X=value for the writer"
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    kafka = begin(args.bootstrap, args.partitions)
    out: dict[str, list[float]] = {}
    if only & {"sequential", "pipelined"}:
        sequential_and_pipelined(kafka, args, only, out)
    if "aggregate" in only:
        aggregate(kafka, args, out)
    print(f"medians of {args.runs} runs:")
    for key, values in out.items():
        print(f"  {key}: {statistics.median(values):,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
