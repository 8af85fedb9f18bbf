"""The serve benchmark's three measurements, each beside its in-process counterpart in the
same run: appends over HTTP (vegeta at a constant rate) and through ``SessionClient``; surface
reads over HTTP (vegeta at full speed) and through ``Views``; and transcript streams fanned
out to many tails, beside the appends' own acknowledgements."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import Future
from typing import Any

from bench.figures import percentile
from bench.pacing import paced_latency
from bench.sse_fanout import close, follow, open_tails
from bench.stack import cpu_seconds
from bench.stalls import settle
from bench.vegeta import Report, Target, attack
from bench.workload import message
from producers import SessionClient
from projectors.views import Views


def append_target(url: str, session_id: str, i: int) -> Target:
    body = {"events": [{"type": "user/message", "surfaceOp": "append", "data": message(i)}]}
    return Target("POST", f"{url}/v1/sessions/{session_id}/events", json.dumps(body).encode())


def measured_attack(
    serve_pid: int, targets: list[Target], seconds: float, *, rate: float = 0, workers: int = 10
) -> tuple[Report, float]:
    """vegeta's report of an attack on the server, and the server's CPU per request in ms."""
    cpu = cpu_seconds(serve_pid)
    report = attack(targets, seconds, rate=rate, workers=workers)
    return report, (cpu_seconds(serve_pid) - cpu) * 1000 / report.requests


def http_appends(url: str, sessions: list[str], rate: float, seconds: float) -> Report:
    """One append a request to ``sessions`` in turn, ``rate`` requests/s for ``seconds``."""
    return attack([append_target(url, s, i) for i, s in enumerate(sessions)], seconds, rate=rate)


def appends(
    client: SessionClient,
    url: str,
    serve_pid: int,
    sessions: list[str],
    rate: float,
    seconds: float,
    warmup: float,
    rounds: int,
) -> dict[str, Any]:
    """``rounds`` of ``seconds`` at ``rate`` appends/s each way, alternated, after a warm-up
    of both; each round's p50 and p99 in ms, and the server's CPU per HTTP append."""
    targets = [append_target(url, s, i) for i, s in enumerate(sessions)]

    def one_append(i: int) -> Future[Any]:
        return client.append_async(
            sessions[i % len(sessions)], "user/message", message(i), surface_op="append"
        )

    paced_latency(one_append, rate, warmup)
    attack(targets, warmup, rate=rate)
    native: list[tuple[float, float]] = []
    http: list[Report] = []
    cpu_ms: list[float] = []
    for _ in range(rounds):
        settle()
        lat = paced_latency(one_append, rate, seconds)
        native.append((percentile(lat, 0.5), percentile(lat, 0.99)))
        settle()
        report, cpu = measured_attack(serve_pid, targets, seconds, rate=rate)
        http.append(report)
        cpu_ms.append(cpu)
    return {
        "session_client": [{"p50_ms": p50, "p99_ms": p99} for p50, p99 in native],
        "http": [
            {
                "p50_ms": r.p50_ms,
                "p99_ms": r.p99_ms,
                "success": r.success,
                "requests": r.requests,
                "status_codes": r.status_codes,
            }
            for r in http
        ],
        "serve_cpu_ms_per_append": cpu_ms,
    }


def reads(
    views: Views,
    url: str,
    session_id: str,
    serve_pid: int,
    seconds: float,
    rounds: int,
    workers: int,
) -> dict[str, Any]:
    """Surface reads/s: over HTTP from ``workers`` connections as fast as they go, and
    ``Views.surface`` in a loop on one thread (what the server does per read), alternated;
    with the server's CPU per HTTP read."""
    target = [Target("GET", f"{url}/v1/sessions/{session_id}/surface")]
    out: dict[str, list[Any]] = {"http_per_s": [], "views_per_s": [], "serve_cpu_ms_per_read": []}
    for _ in range(rounds):
        count, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            views.surface(session_id)
            count += 1
        out["views_per_s"].append(count / (time.monotonic() - started))
        report, cpu = measured_attack(serve_pid, target, seconds, workers=workers)
        assert report.success == 1.0, report.status_codes
        out["http_per_s"].append(report.throughput)
        out["serve_cpu_ms_per_read"].append(cpu)
    return out


async def _fanout(
    client: SessionClient, url: str, session_id: str, tails: int, count: int, rate: float
) -> dict[str, Any]:
    first = client.append(session_id, "user/message", message(0), surface_op="append")
    stream = f"{url}/v1/sessions/{session_id}/transcript/stream"
    opened = time.monotonic()
    streams = await open_tails(stream, first.seq, tails)
    open_s = time.monotonic() - opened
    await asyncio.sleep(2)  # every stream's follow is waiting on Redis
    last = first.seq + count
    followers = [asyncio.create_task(follow(t, last)) for t in streams]
    sent: dict[int, float] = {}
    acks: list[float] = []

    def append_paced() -> None:
        start = time.monotonic()
        for i in range(count):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            at = time.monotonic()
            event = client.append(session_id, "user/message", message(i + 1), surface_op="append")
            acks.append((time.monotonic() - at) * 1000)
            sent[event.seq] = at

    await asyncio.to_thread(append_paced)
    try:
        await asyncio.wait_for(asyncio.gather(*followers), timeout=120)
    finally:
        close(streams)
    delays = [
        (t.arrivals[seq] - at) * 1000
        for t in streams
        for seq, at in sent.items()
        if seq in t.arrivals
    ]
    slowest_tail = [
        max((t.arrivals[seq] - at) * 1000 for t in streams if seq in t.arrivals)
        for seq, at in sent.items()
    ]
    return {
        "tails": tails,
        "appends": count,
        "open_s": open_s,
        "delivered": len(delays),
        "expected": tails * count,
        "delivery_p50_ms": percentile(delays, 0.5),
        "delivery_p99_ms": percentile(delays, 0.99),
        "all_tails_p50_ms": percentile(slowest_tail, 0.5),
        "ack_p50_ms": percentile(acks, 0.5),
        "ack_p99_ms": percentile(acks, 0.99),
    }


def fanout(
    client: SessionClient, url: str, session_id: str, tails: int, count: int, rate: float
) -> dict[str, Any]:
    """``tails`` streams open on one session, then ``count`` appends at ``rate``/s: from each
    append's send to its arrival at each tail (p50, p99), and to its arrival at the last tail
    (p50), beside the appends' acknowledgements."""
    return asyncio.run(_fanout(client, url, session_id, tails, count, rate))
