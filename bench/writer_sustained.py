"""The writer with its client on the same cores: events/s committed with many appends in
flight over many sessions (``append_async``, and ``append_many_async`` of 10), and the CPU
the writer and the client spend per event."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from bench.stack import cpu_seconds
from bench.workload import message
from bench.writer_metrics import scrape
from producers import SessionClient, draft

# (name in the results, events per command)
PHASES = (("append_async", 1), ("append_many_x10", 10))


def sustained(
    client: SessionClient, sessions: list[str], seconds: float, window: int, per_command: int
) -> float:
    """Events committed per second with ``window`` commands in flight."""
    slots = threading.Semaphore(window)
    done = [0]
    lock = threading.Lock()

    def finished(fut: Future[Any]) -> None:
        fut.result()
        with lock:
            done[0] += per_command
        slots.release()

    i = 0
    start = time.monotonic()
    counted_from = start + 1.0  # warm-up second not counted
    base = 0
    while True:
        now = time.monotonic()
        if now >= counted_from and base == 0:
            with lock:
                base = done[0] or 1
            counted_from = now
        if now - start >= seconds + 1.0:
            break
        slots.acquire()
        sid = sessions[i % len(sessions)]
        if per_command == 1:
            fut: Future[Any] = client.append_async(
                sid, "user/message", message(i), surface_op="append"
            )
        else:
            drafts = [
                draft("user/message", message(i * per_command + k), surface_op="append")
                for k in range(per_command)
            ]
            fut = client.append_many_async(sid, drafts)
        fut.add_done_callback(finished)
        i += 1
    elapsed = time.monotonic() - counted_from
    with lock:
        total = done[0] - base
    for _ in range(window):  # drain
        slots.acquire()
    return total / elapsed


def sustained_phases(
    client: SessionClient,
    writer_pid: int,
    metrics_port: int,
    sessions: list[str],
    seconds: float,
    window: int,
) -> dict[str, float]:
    """Each of :data:`PHASES` for ``seconds``, ``window`` events in flight: events/s, and
    writer and client CPU µs per event the writer committed."""
    results = {}
    for name, per_command in PHASES:
        cpu, commands = cpu_seconds(writer_pid), scrape(metrics_port)
        client_cpu = time.process_time()
        results[f"{name}_events_per_s"] = sustained(
            client, sessions, seconds, window // per_command, per_command
        )
        done = scrape(metrics_port)["dsh_writer_batch_commands_sum"]
        events = (done - commands["dsh_writer_batch_commands_sum"]) * per_command
        results[f"{name}_writer_cpu_us_per_event"] = (cpu_seconds(writer_pid) - cpu) / events * 1e6
        results[f"{name}_client_cpu_us_per_event"] = (
            (time.process_time() - client_cpu) / events * 1e6
        )
    return results
