"""The writer alone: how fast it works through a backlog of commands published before it
started, with no client in the box competing for the cores."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Producer

from bench.stack import cpu_seconds
from bench.workload import message
from bench.writer_metrics import gc_pauses, scrape
from producers import draft
from producers.client import command_headers
from schemas import AppendCommand, encode_command
from servicekit.partitioning import PRODUCER_PARTITIONER
from servicekit.settings import KafkaSettings


def produce_backlog(
    kafka: KafkaSettings, sessions: list[str], commands: int, per_command: int
) -> int:
    """Encodes and publishes ``commands`` append commands (``per_command`` events each, round
    robin over ``sessions``) straight to the commands topic, as clients would have while no
    writer ran. Returns the number of events they carry."""
    producer = Producer({**kafka.client_config(), **PRODUCER_PARTITIONER, "linger.ms": 20})
    topic = kafka.topic("commands")
    client_id = f"backlog-{uuid.uuid4().hex[:8]}"
    for i in range(commands):
        sid = sessions[i % len(sessions)]
        rid = f"{client_id}-{i}"
        drafts = tuple(
            draft("user/message", message(i * per_command + k), surface_op="append")
            for k in range(per_command)
        )
        value = encode_command(AppendCommand(rid, client_id, sid, drafts, None))
        while True:
            try:
                producer.produce(topic, value=value, key=sid.encode(), headers=command_headers(rid))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("the backlog was not all delivered")
    return commands * per_command


def drain(writer_pid: int, metrics_port: int, events: int, per_command: int) -> dict[str, Any]:
    """Watches a freshly started writer work through a backlog of ``events``: events/s and
    writer CPU per event from its first second of work to the end (start-up, the restore and
    the first writes to brand-new partitions are not counted)."""
    target = events // per_command
    deadline = time.monotonic() + 300

    def done() -> float:
        try:
            return scrape(metrics_port).get("dsh_writer_batch_commands_sum", 0.0)
        except OSError:  # the metrics server is not up yet
            return 0.0

    while done() == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the writer never started on the backlog")
        time.sleep(0.05)
    time.sleep(1.0)
    first, t0, cpu0 = done(), time.monotonic(), cpu_seconds(writer_pid)
    before = scrape(metrics_port)
    if first >= target:
        raise RuntimeError("the backlog was gone within a second: make it bigger")
    while (now := done()) < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the writer handled {now:.0f} of {target} backlog commands")
        time.sleep(0.02)
    elapsed, cpu = time.monotonic() - t0, cpu_seconds(writer_pid) - cpu0
    counted = (target - first) * per_command
    return {
        "events_per_s": counted / elapsed,
        "writer_cpu_us_per_event": cpu / counted * 1e6,
        "gc": gc_pauses(before, scrape(metrics_port)),
    }
