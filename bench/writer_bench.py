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
import gc
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.stalls import ClientGcPauses, PressureSampler, describe, slowest_second
from deploy.local.processes import free_ports
from producers import SessionClient, draft
from producers.client import command_headers
from schemas import AppendCommand, encode_command, encode_event
from servicekit.partitioning import PRODUCER_PARTITIONER, partition_for
from servicekit.settings import KafkaSettings, configure_codec
from servicekit.topics import ensure_topics

REPO = Path(__file__).resolve().parents[1]
SLOW_MS = 50.0  # issue 5's p99 target for the round trip at 500/s
TEXT = "The quick brown fox jumps over the lazy dog. " * 4  # ~180 bytes of prompt text


def message(i: int) -> dict[str, Any]:
    return {
        "id": f"m-{i}",
        "role": "user",
        "content": [{"type": "text", "text": TEXT}],
        "source": {"kind": "user"},
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (steadier than wall time on a busy box)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(port: int) -> dict[str, float]:
    """The writer's samples from its /metrics endpoint, keyed by name{labels} as printed."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


PHASES = ("validate", "offsets", "flush", "previous", "commit")


def gc_pauses(before: dict[str, float], after: dict[str, float]) -> dict[str, list[float]]:
    """Per generation: collections and their total ms between two scrapes."""
    out = {}
    for g in range(3):
        key = f'dsh_writer_gc_pause_seconds_{{}}{{{{generation="{g}"}}}}'
        n = after.get(key.format("count"), 0) - before.get(key.format("count"), 0)
        total = after.get(key.format("sum"), 0) - before.get(key.format("sum"), 0)
        out[str(g)] = [n, total * 1000]
    return out


def phase_means_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean time per transaction in each phase between two scrapes."""
    out = {}
    for phase in PHASES:
        key = f'dsh_writer_transaction_phase_seconds_{{}}{{{{phase="{phase}"}}}}'
        n = after[key.format("count")] - before.get(key.format("count"), 0)
        total = after[key.format("sum")] - before.get(key.format("sum"), 0)
        out[phase] = total / n * 1000 if n else 0.0
    return out


def p99_bound_ms(
    before: dict[str, float], after: dict[str, float], histogram: str, labels: str = ""
) -> float:
    """The bucket bound under which 99 % of a histogram's observations between two scrapes
    fell (an upper bound of their p99); ``labels``: the sample's other labels, as printed."""
    prefix = f'{histogram}_bucket{{le="'
    suffix = f'"{"," if labels else ""}{labels}}}'
    bounds = sorted(
        (float(k[len(prefix) : -len(suffix)]), after[k] - before.get(k, 0))
        for k in after
        if k.startswith(prefix) and k.endswith(suffix)
    )
    total = bounds[-1][1] if bounds else 0
    return next((b * 1000 for b, n in bounds if n >= 0.99 * total), 0.0) if total else 0.0


def phase_p99_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per phase, :func:`p99_bound_ms` of the transactions between two scrapes."""
    return {
        phase: p99_bound_ms(
            before, after, "dsh_writer_transaction_phase_seconds", f'phase="{phase}"'
        )
        for phase in PHASES
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_writer(
    kafka: KafkaSettings, group: str, log: Path, metrics_port: int, extra: list[str]
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_KAFKA_", "DSH_WRITER_"))}
    env.update(
        DSH_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
        DSH_KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        DSH_WRITER_GROUP_ID=group,
        DSH_WRITER_METRICS_PORT=str(metrics_port),
        DSH_WRITER_SESSION_TIMEOUT_MS="6000",
    )
    for item in extra:
        key, _, value = item.partition("=")
        env[key] = value
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", "writer"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


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


def paced_latency(submit: Any, rate: float, seconds: float) -> list[float]:
    """Open loop: one operation every 1/rate s; returns each one's latency in ms."""
    return [ms for _, ms in timed_paced(submit, rate, seconds)]


def timed_paced(submit: Any, rate: float, seconds: float) -> list[tuple[float, float]]:
    """As :func:`paced_latency`, with each operation's send time (``time.monotonic()``)."""
    latencies: list[tuple[float, float]] = []
    lock = threading.Lock()
    futures = []
    interval = 1.0 / rate
    start = time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        target = start + i * interval
        delay = target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent = time.monotonic()
        fut = submit(i)

        def record(_f: Future[Any], sent: float = sent) -> None:
            with lock:
                latencies.append((sent, (time.monotonic() - sent) * 1000))

        fut.add_done_callback(record)
        futures.append(fut)
    for f in futures:
        f.result(60)
    return latencies


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


def raw_ceiling(kafka: KafkaSettings, seconds: float, rate: float) -> dict[str, float]:
    """A bare transactional producer on the same broker: records/s in 1000-record
    transactions, and one-record transaction latency at ``rate``/s."""
    topic = kafka.topic("events")
    producer = Producer(
        {
            **kafka.client_config(),
            **PRODUCER_PARTITIONER,
            "transactional.id": f"raw-{uuid.uuid4().hex}",
            "retry.backoff.ms": 10,
            "linger.ms": 1,
        }
    )
    producer.init_transactions(30)
    from dsh import Event

    value = encode_event(Event("user/message", 0, 0, message(0), "append"), "raw-session")
    keys = [f"raw-{i}".encode() for i in range(64)]
    n = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        producer.begin_transaction()
        for k in range(1000):
            producer.produce(topic, value, keys[k % 64])
        producer.commit_transaction(30)
        n += 1000
    throughput = n / (time.monotonic() - start)

    pool = threading.Lock()  # one transaction at a time: a producer has one open at most

    def one(i: int) -> Future[None]:
        fut: Future[None] = Future()
        with pool:
            producer.begin_transaction()
            producer.produce(topic, value, keys[i % 64])
            producer.commit_transaction(30)
        fut.set_result(None)
        return fut

    lat = paced_latency(one, rate, seconds)

    # The same with the writer's extra step: the consumed offsets sent to the transaction
    # with a group member's metadata (AddOffsetsToTxn + TxnOffsetCommit).
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": f"raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    commands = kafka.topic("commands")
    consumer.subscribe([commands])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)

    def with_offsets(i: int) -> Future[None]:
        fut: Future[None] = Future()
        with pool:
            producer.begin_transaction()
            producer.produce(topic, value, keys[i % 64])
            producer.send_offsets_to_transaction(
                [TopicPartition(commands, 0, i + 1)], consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
        fut.set_result(None)
        return fut

    lat_offsets = paced_latency(with_offsets, rate, seconds)
    consumer.close()
    return {
        "events_per_s": throughput,
        "p50_ms": percentile(lat, 0.5),
        "p99_ms": percentile(lat, 0.99),
        "offsets_p50_ms": percentile(lat_offsets, 0.5),
        "offsets_p99_ms": percentile(lat_offsets, 0.99),
    }


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every Kafka benchmark takes: ``--bootstrap``."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap", default=os.environ.get("DSH_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    )
    return parser


def main() -> int:
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
    args = parser.parse_args()
    # DSH_CODEC_NATIVE=off: the codec's Python readers here and in the services started.
    configure_codec()

    kafka = KafkaSettings(
        bootstrap_servers=args.bootstrap, topic_prefix=f"bench-{uuid.uuid4().hex[:8]}.dsh.session"
    )
    ensure_topics(kafka, args.partitions)
    sessions = [f"bench-{i}" for i in range(args.sessions)]
    assert {partition_for(s, args.partitions) for s in sessions} == set(range(args.partitions))
    backlog = 0
    if args.backlog and not args.skip_sustained:
        backlog = produce_backlog(kafka, sessions, args.backlog // 10, 10)
    log = Path(f"/tmp/writer-bench-{uuid.uuid4().hex[:6]}.log")
    (metrics_port,) = free_ports(1)
    writer = start_writer(
        kafka, f"bench-writer-{uuid.uuid4().hex[:8]}", log, metrics_port, args.writer_env
    )
    results: dict[str, Any] = {
        "partitions": args.partitions,
        "sessions": args.sessions,
        "window": args.window,
        "seconds": args.seconds,
    }
    try:
        if backlog:
            drained = drain(writer.pid, metrics_port, backlog, 10)
            results["backlog_events"] = backlog
            results["backlog_events_per_s"] = drained["events_per_s"]
            results["backlog_writer_cpu_us_per_event"] = drained["writer_cpu_us_per_event"]
            results["backlog_gc"] = drained["gc"]
        with SessionClient(settings=kafka, timeout=60) as client:
            probe = f"probe-{uuid.uuid4().hex[:6]}"
            client.append(probe, "user/message", message(0), surface_op="append")  # writer up
            phases = () if args.skip_sustained else (("append_async", 1), ("append_many_x10", 10))
            for name, per_command in phases:
                cpu, commands = cpu_seconds(writer.pid), scrape(metrics_port)
                client_cpu = time.process_time()
                results[f"{name}_events_per_s"] = sustained(
                    client, sessions, args.seconds, args.window // per_command, per_command
                )
                done = scrape(metrics_port)["dsh_writer_batch_commands_sum"]
                events = (done - commands["dsh_writer_batch_commands_sum"]) * per_command
                results[f"{name}_writer_cpu_us_per_event"] = (
                    (cpu_seconds(writer.pid) - cpu) / events * 1e6
                )
                results[f"{name}_client_cpu_us_per_event"] = (
                    (time.process_time() - client_cpu) / events * 1e6
                )

            def one_append(i: int) -> Future[Any]:
                return client.append_async(
                    sessions[i % len(sessions)], "user/message", message(i), surface_op="append"
                )

            # The paced phase measures a steady 500/s, not what the phases before it left:
            # - their writes (hundreds of MB) are written back now, not 30 s later in the
            #   middle of it (io stalls of 35-161 ms/s in its slowest second, 3 of 3 runs);
            # - what they left in this process is swept now and frozen, not walked by a gen-2
            #   collection in the middle of it (24-40 ms, seen in 2 of 2 runs).
            os.sync()
            gc.collect()
            gc.freeze()
            if args.warmup > 0:  # the first writes to brand-new partitions are slow at the broker
                warm = paced_latency(one_append, args.rate, args.warmup)
                results["warmup_p50_ms"] = percentile(warm, 0.5)
                results["warmup_p99_ms"] = percentile(warm, 0.99)
            before = scrape(metrics_port)
            before_commits = before["dsh_writer_transaction_commit_seconds_count"]
            before_commit_s = before["dsh_writer_transaction_commit_seconds_sum"]
            before_batch = before["dsh_writer_batch_commands_sum"]
            with ClientGcPauses() as client_gc, PressureSampler() as pressure:
                timed = timed_paced(one_append, args.rate, args.seconds)
            lat = [ms for _, ms in timed]
            results["paced_slowest_second"] = slowest_second(timed, pressure, SLOW_MS)
            results["paced_client_gc"] = client_gc.by_generation
            results["paced_client_gc_longest_ms"] = client_gc.longest_ms
            results["round_trip_p50_ms"] = percentile(lat, 0.5)
            results["round_trip_p99_ms"] = percentile(lat, 0.99)
            after = scrape(metrics_port)
            commits = after["dsh_writer_transaction_commit_seconds_count"] - before_commits
            results["paced_mean_commit_ms"] = (
                (after["dsh_writer_transaction_commit_seconds_sum"] - before_commit_s)
                / commits
                * 1000
            )
            results["paced_mean_batch"] = (
                after["dsh_writer_batch_commands_sum"] - before_batch
            ) / commits
            results["paced_phase_mean_ms"] = phase_means_ms(before, after)
            results["paced_phase_p99_bound_ms"] = phase_p99_ms(before, after)
            results["paced_writer_latency_p99_bound_ms"] = p99_bound_ms(
                before, after, "dsh_writer_append_latency_seconds"
            )
            results["paced_command_wait_p99_bound_ms"] = p99_bound_ms(
                before, after, "dsh_writer_command_wait_seconds"
            )
            results["paced_gc"] = gc_pauses(before, after)
        # Every collection of the writer's life, start-up to here: an older generation's
        # collection walks the whole long-lived heap and stops the writer for its length.
        results["writer_gc"] = gc_pauses({}, scrape(metrics_port))
    finally:
        writer.terminate()
        writer.wait(30)
    results["raw"] = raw_ceiling(kafka, args.seconds, args.rate)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        raw = results["raw"]
        if not args.skip_sustained:
            print(
                f"writer: {results['append_async_events_per_s']:,.0f} events/s (append_async), "
                f"{results['append_many_x10_events_per_s']:,.0f} events/s (10 per command); "
                f"raw transactional producer {raw['events_per_s']:,.0f} records/s"
            )
        print(
            f"round trip at {args.rate:.0f}/s: p50 {results['round_trip_p50_ms']:.1f} ms, "
            f"p99 {results['round_trip_p99_ms']:.1f} ms; raw one-record transaction p50 "
            f"{raw['p50_ms']:.1f} ms, p99 {raw['p99_ms']:.1f} ms"
        )
        if "warmup_p50_ms" in results:
            print(
                f"  warm-up ({args.warmup:g} s at the same rate, not counted above): "
                f"p50 {results['warmup_p50_ms']:.1f} ms, p99 {results['warmup_p99_ms']:.1f} ms"
            )
        if backlog:
            print(
                f"  backlog drain (10 per command, no client running): "
                f"{results['backlog_events_per_s']:,.0f} events/s, writer CPU "
                f"{results['backlog_writer_cpu_us_per_event']:.0f} µs per event; its GC "
                "(collections, total ms) by generation: "
                + ", ".join(f"{g}: {n:.0f}, {t:.1f}" for g, (n, t) in results["backlog_gc"].items())
            )
        if not args.skip_sustained:
            print(
                "  writer CPU per event: "
                f"{results['append_async_writer_cpu_us_per_event']:.0f} µs (1 per command), "
                f"{results['append_many_x10_writer_cpu_us_per_event']:.0f} µs (10 per command)"
            )
            print(
                "  client CPU per event: "
                f"{results['append_async_client_cpu_us_per_event']:.0f} µs (1 per command), "
                f"{results['append_many_x10_client_cpu_us_per_event']:.0f} µs (10 per command)"
            )
        phases = results["paced_phase_mean_ms"]
        print(
            f"  while paced: {results['paced_mean_batch']:.1f} commands per transaction; mean "
            + ", ".join(f"{p} {phases[p]:.1f} ms" for p in PHASES)
            + f"; raw one-record transaction with offsets p50 {raw['offsets_p50_ms']:.1f} ms, "
            f"p99 {raw['offsets_p99_ms']:.1f} ms"
        )
        bounds = results["paced_phase_p99_bound_ms"]
        print(
            "  while paced, p99 of each phase at most: "
            + ", ".join(f"{p} {bounds[p]:.0f} ms" for p in PHASES)
            + "; from a command's timestamp to its commit at most "
            + f"{results['paced_writer_latency_p99_bound_ms']:.0f} ms, of which waiting to be "
            + f"taken at most {results['paced_command_wait_p99_bound_ms']:.0f} ms"
        )
        print("  " + describe(results["paced_slowest_second"], SLOW_MS))
        for what, key in (
            ("writer GC while paced", "paced_gc"),
            ("client GC while paced", "paced_client_gc"),
            ("writer GC over the whole run", "writer_gc"),
        ):
            print(
                f"  {what} (collections, total ms) by generation: "
                + ", ".join(f"{g}: {n:.0f}, {ms:.1f}" for g, (n, ms) in results[key].items())
            )
        print(
            "  client's longest collection while paced: "
            f"{results['paced_client_gc_longest_ms']:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
