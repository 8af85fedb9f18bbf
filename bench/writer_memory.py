"""Writer memory benchmark: the writer's resident set with N sessions of M messages, without a
bound and with ``DSH_WRITER_MAX_RESIDENT_SESSIONS``.

Each message is ~1 KiB of text, user and assistant alternating, appended 50 per command, one
session after another. For each mode a writer process of its
own on topics of its own: its RSS idle (partitions owned), then after the fill; the marginal
MB per session and so how many such sessions one GB holds live. With the bound, also the cost
of bringing an evicted session back: one read of each session (``SessionClient.read``, which
the writer answers from memory, restoring the session first), p50 against the same read
of a session it holds. Run against a stack you started (`dsh up --no-services`):

    .venv/bin/python -m bench.writer_memory --bootstrap 127.0.0.1:19092 --sessions 4
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.stack import begin, bench_parser, run_id, start_writer, stop
from bench.writer_metrics import scrape
from deploy.local.processes import free_ports
from producers import SessionClient
from servicekit.settings import KafkaSettings

PARTITIONS = 2
PER_COMMAND = 50
WINDOW = 40  # commands in flight
TEXT = ("The quick brown fox jumps over the lazy dog. " * 23)[:1024]  # 1 KiB


def drafts(start: int, count: int) -> list[dict[str, Any]]:
    """Messages ``start`` ..< ``start + count``: user on even numbers, assistant on odd."""
    out: list[dict[str, Any]] = []
    for i in range(start, start + count):
        content = [{"type": "text", "text": TEXT}]
        if i % 2 == 0:
            msg = {"id": f"m{i}", "role": "user", "content": content, "source": {"kind": "user"}}
            out.append({"type": "user/message", "data": msg, "surfaceOp": "append"})
        else:
            source = {"kind": "model", "provider": "mock", "model": "m1"}
            msg = {"id": f"m{i}", "role": "assistant", "content": content, "source": source}
            data = {"turn": 1, "step": 1, "message": msg, "stream": []}
            out.append({"type": "assistant/message", "data": data, "surfaceOp": "append"})
    return out


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def fill(client: SessionClient, sids: list[str], messages: int) -> float:
    """One session after another (an agent's conversation, then the next one's): what is
    filled before stays idle, which is what a bound evicts."""
    started = time.monotonic()
    futures: list[Any] = []
    for sid, start in ((sid, start) for sid in sids for start in range(0, messages, PER_COMMAND)):
        count = min(PER_COMMAND, messages - start)
        futures.append(client.append_many_async(sid, drafts(start, count), invariants=False))
        if len(futures) >= WINDOW:
            for f in futures:
                f.result(120)
            futures = []
    for f in futures:
        f.result(120)
    return time.monotonic() - started


def read_ms(client: SessionClient, sid: str) -> float:
    started = time.perf_counter()
    client.read(sid)
    return (time.perf_counter() - started) * 1000


def measure(bootstrap: str, sessions: int, messages: int, bound: int) -> dict[str, Any]:
    kafka: KafkaSettings = begin(bootstrap, PARTITIONS)
    port = free_ports(1)[0]
    # Unbounded is measured with the default byte budget off: what a session held costs.
    extra = [f"DSH_WRITER_MAX_RESIDENT_SESSIONS={bound}"] if bound else []
    extra.append("DSH_WRITER_MAX_RESIDENT_BYTES=0")
    writer = start_writer(kafka, f"mem-{run_id()}", metrics_port=port, extra=extra)
    try:
        sids = [f"mem-{run_id()}-{i}" for i in range(sessions)]
        with SessionClient(settings=kafka, timeout=120) as client:
            client.append_many_async("warm-up", drafts(0, 2), invariants=False).result(120)
            time.sleep(2)
            idle = rss_mb(writer.pid)
            seconds = fill(client, sids, messages)
            time.sleep(2)
            after = rss_mb(writer.pid)
            samples = scrape(port)
            resident = sum(
                v for k, v in samples.items() if k.startswith("dsh_writer_resident_sessions")
            )
            result: dict[str, Any] = {
                "bound": bound,
                "rss_idle_mb": round(idle, 1),
                "rss_after_mb": round(after, 1),
                "mb_per_session": round((after - idle) / sessions, 1),
                "fill_s": round(seconds, 1),
                "messages_per_s": round(sessions * messages / seconds),
                "resident_sessions": resident,
            }
            if bound:
                # The last one filled is resident; the others come back from the topics.
                held = sids[-1]
                cold = [read_ms(client, sid) for sid in sids[:-1]]
                warm = [read_ms(client, held) for _ in range(5)]
                result["read_evicted_p50_ms"] = round(statistics.median(cold), 1)
                result["read_resident_p50_ms"] = round(statistics.median(warm), 1)
                result["rss_after_reads_mb"] = round(rss_mb(writer.pid), 1)
                result["evictions"] = scrape(port).get("dsh_writer_sessions_evicted_total", 0)
    finally:
        stop(writer)
    return result


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--bound", type=int, default=2, help="max resident sessions, bounded run")
    args = parser.parse_args()
    runs = [measure(args.bootstrap, args.sessions, args.messages, b) for b in (0, args.bound)]
    per_session = runs[0]["mb_per_session"]
    print(json.dumps(runs, indent=2))
    print(
        f"{args.sessions} sessions x {args.messages} messages of 1 KiB: "
        f"{per_session} MB each held live, so {1024 / per_session:.0f} live sessions per GB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
