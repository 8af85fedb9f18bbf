"""Projector benchmark: events/s applied per projector process next to a raw pipelined Redis
write of the same keys; replay rate; latency from a committed event to a visible surface; and
from a client's append to the visible surface (``end_to_end``), whose slowest second is
reported beside the machine's stalls in it (bench/stalls.py).

Runs against a stack you already run (``dsh up``); every run uses its own topic prefix and
Redis key prefix, and deletes its keys at the end.

    .venv/bin/python bench/projector_bench.py --bootstrap 127.0.0.1:19092 \
        --redis-url redis://127.0.0.1:16379/0
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

import redis
from confluent_kafka import Producer
from pydantic import SecretStr

import dsh
from bench.stalls import ClientGcPauses, PressureSampler, describe, slowest_second
from cli.wiring import build_runtime
from projectors.records import decode, encode
from projectors.replay import replay
from projectors.runtime import Runtime
from projectors.settings import ProjectorSettings
from schemas import native
from servicekit.partitioning import PRODUCER_PARTITIONER
from servicekit.settings import KafkaSettings, RedisSettings, configure_codec
from servicekit.topics import ensure_topics

PROJECTIONS = ("surface", "transcript", "audit")
E2E_SLOW_MS = 100.0  # issue 6's p99 target from append to visible surface
MODEL = {"kind": "model", "provider": "mock", "model": "m1"}


def session(sid: str, turns: int) -> dsh.Session:
    """Realistic turns: prompt, step, assistant with a tool call, tool call and result, ends."""
    s = dsh.Session.create(sid, clock=lambda: 1_700_000_000_000)
    for t in range(1, turns + 1):
        call = f"c{t}"
        s.append("turn/start", {"turn": t})
        prompt = {"type": "text", "text": f"question {t} " + "x" * 200}
        s.append(
            "user/message",
            {"id": f"u{t}", "role": "user", "content": [prompt], "source": {"kind": "user"}},
            "append",
        )
        s.append("step/start", {"turn": t, "step": 1})
        content = [
            {"type": "text", "text": "let me look " + "y" * 200},
            {"type": "tool-call", "id": call, "name": "grep", "arguments": "{}"},
        ]
        s.append(
            "assistant/message",
            {
                "turn": t,
                "step": 1,
                "stream": [],
                "message": {
                    "id": f"a{t}",
                    "role": "assistant",
                    "content": content,
                    "source": MODEL,
                },
            },
            "append",
        )
        tc = s.append(
            "tool/call", {"turn": t, "step": 1, "callId": call, "name": "grep", "arguments": "{}"}
        )
        result = {
            "type": "tool-result",
            "toolCallId": call,
            "isError": False,
            "content": [{"type": "text", "text": "z" * 300}],
        }
        s.append(
            "tool/result",
            {
                "turn": t,
                "step": 1,
                "message": {
                    "id": f"r{t}",
                    "role": "user",
                    "content": [result],
                    "source": {"kind": "tool", "callId": call},
                },
            },
            "append",
            [tc.seq],
        )
        s.append("step/end", {"turn": t, "step": 1})
        s.append("turn/end", {"turn": t, "reason": {"kind": "completed"}})
    return s


def publish(kafka: KafkaSettings, records: list[tuple[str, bytes]], per_txn: int = 2000) -> None:
    producer = Producer(
        {
            **kafka.client_config(),
            **PRODUCER_PARTITIONER,
            "transactional.id": f"bench-{uuid.uuid4().hex}",
            "linger.ms": 5,
            "retry.backoff.ms": 5,
        }
    )
    producer.init_transactions(30)
    topic = kafka.topic("events")
    for i in range(0, len(records), per_txn):
        producer.begin_transaction()
        for sid, value in records[i : i + per_txn]:
            producer.produce(topic, key=sid.encode(), value=value)
        producer.commit_transaction(60)


def delete_prefix(client: redis.Redis | redis.RedisCluster, prefix: str) -> None:
    # One Redis (the bench does not run on a cluster: UNLINK of many slots would be refused).
    batch = []
    for key in client.scan_iter(match=f"{prefix}:*", count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            client.unlink(*batch)
            batch = []
    if batch:
        client.unlink(*batch)


def settings_for(run: str, **extra: Any) -> ProjectorSettings:
    return ProjectorSettings(
        group_prefix=f"bench-{run}", key_prefix=f"bench-{run}", poll_timeout_s=0.05, **extra
    )


def throughput(
    kafka: KafkaSettings, redis_settings: RedisSettings, name: str, total: int
) -> tuple[float, float]:
    """Events/s one projector applies, from its first applied event to its last, and the
    process CPU time per event over the same span (robust to a machine shared with others)."""
    run = uuid.uuid4().hex[:8]
    runtime = build_runtime(name, kafka, redis_settings, settings_for(run, batch_size=1000))
    stop = threading.Event()
    thread = threading.Thread(target=runtime.run, args=(stop,), daemon=True)
    thread.start()
    first = last = cpu_first = cpu_last = 0.0
    first_done = 0
    while True:
        done = runtime.stats["applied"]
        now = time.perf_counter()
        if done and not first:
            first, cpu_first, first_done = now, time.process_time(), done
        if done >= total:
            last, cpu_last = now, time.process_time()
            break
        time.sleep(0.002)
    stop.set()
    thread.join(30)
    delete_prefix(runtime.redis, f"bench-{run}")
    # Whatever was applied before `first` was seen is not in the span.
    counted = total - first_done
    return counted / (last - first), (cpu_last - cpu_first) / counted


def raw_write(
    kafka: KafkaSettings,
    redis_settings: RedisSettings,
    name: str,
    values: list[tuple[str, bytes]],
    batch: int = 1000,
) -> float:
    """The same keys and values written with plain pipelined commands: no decoding, no
    planning, no script — what Redis alone costs for this projection's writes."""
    run = uuid.uuid4().hex[:8]
    runtime: Runtime[Any] = build_runtime(name, kafka, redis_settings, settings_for(run))
    projection = runtime.projection
    states: dict[str, Any] = {}
    commands: list[list[tuple[Any, ...]]] = []
    for offset, (sid, value) in enumerate(values):
        record = decode(sid.encode(), value, 0, offset)
        state = states.setdefault(sid, projection.fresh())
        ops = projection.plan(state, record.event)  # type: ignore[union-attr]
        keys = projection.all_keys(sid)
        event_commands: list[tuple[Any, ...]] = []
        i = 0
        while i < len(ops):
            op, key = ops[i], keys[int(ops[i + 1]) - 1]
            if op == "H":
                event_commands.append(("HSET", key, ops[i + 2], ops[i + 3]))
                i += 4
            elif op == "D":
                event_commands.append(("HDEL", key, ops[i + 2]))
                i += 3
            elif op == "A":
                event_commands.append(("HSET", key, ops[i + 2], ops[i + 3]))
                i += 4
            elif op == "R":
                event_commands.append(("RPUSH", key, ops[i + 2]))
                i += 3
            elif op == "L":  # a replace on the node list: not in this workload
                raise AssertionError("the benchmark workload has no replaces")
            else:
                n = int(ops[i + 3])
                event_commands.append(("XADD", key, ops[i + 2], *ops[i + 4 : i + 4 + 2 * n]))
                i += 4 + 2 * n
        event_commands.append(("HSET", keys[0], "applied", record.seq))  # type: ignore[union-attr]
        commands.append(event_commands)
    client = runtime.redis
    started = time.perf_counter()
    for i in range(0, len(commands), batch):
        pipe = client.pipeline(transaction=False)
        for event_commands in commands[i : i + batch]:
            for command in event_commands:
                pipe.execute_command(*command)
        pipe.execute()
    seconds = time.perf_counter() - started
    delete_prefix(client, f"bench-{run}")
    return len(values) / seconds


def replay_rate(
    kafka: KafkaSettings, redis_settings: RedisSettings, names: tuple[str, ...], workers: int = 0
) -> float:
    """Records/s of a whole-topic replay; ``workers`` as DSH_PROJECTOR_REPLAY_WORKERS (0: one
    forked worker per CPU, 1: in this process)."""
    run = uuid.uuid4().hex[:8]
    settings = settings_for(run, replay_workers=workers)
    runtimes = [build_runtime(n, kafka, redis_settings, settings) for n in names]
    result = replay(kafka, runtimes)
    delete_prefix(runtimes[0].redis, f"bench-{run}")
    return result.records_per_second


def latency(kafka: KafkaSettings, redis_url: str, rate: int, seconds: float) -> list[float]:
    """Commit of an event → its seq visible as applied on the surface, with a projector
    process (`dsh project surface`) under `rate` events/s spread over 50 sessions."""
    run = uuid.uuid4().hex[:8]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env.update(
        DSH_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
        DSH_KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        DSH_REDIS_URL=redis_url,
        DSH_PROJECTOR_GROUP_PREFIX=f"bench-{run}",
        DSH_PROJECTOR_KEY_PREFIX=f"bench-{run}",
        DSH_PROJECTOR_POLL_TIMEOUT_S="0.05",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "project", "surface"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis.from_url(redis_url)
    sessions = [session(f"lat-{run}-{i}", 60) for i in range(50)]
    events = [[encode(s.id, e.to_json()) for e in s.events()] for s in sessions]
    producer = Producer(
        {
            **kafka.client_config(),
            **PRODUCER_PARTITIONER,
            "transactional.id": f"bench-lat-{run}",
            "linger.ms": 0,
            "retry.backoff.ms": 5,
        }
    )
    producer.init_transactions(30)
    topic = kafka.topic("events")
    probe = sessions[0].id
    probe_key = f"bench-{run}:{{{probe}}}:surface:meta"
    committed: dict[int, float] = {}
    visible: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:
        last = -1
        while not stop.is_set():
            value = client.hget(probe_key, "applied")
            now = time.perf_counter()
            seen = -1 if value is None else int(value)
            for seq in range(last + 1, seen + 1):
                visible[seq] = now
            last = max(last, seen)
            time.sleep(0.0005)

    # Warm up: the projector joins its group and applies a first event of every session.
    producer.begin_transaction()
    for s, evs in zip(sessions, events, strict=True):
        producer.produce(topic, key=s.id.encode(), value=evs[0])
    producer.commit_transaction(30)
    deadline = time.monotonic() + 60
    while client.hget(probe_key, "applied") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    tick = 0.01  # one transaction per 10 ms, like a writer's batch
    per_tick = max(1, int(rate * tick))
    cursor = [1] * len(sessions)
    started = time.perf_counter()
    n = 0
    while time.perf_counter() - started < seconds:
        producer.begin_transaction()
        probe_seq = None
        for _ in range(per_tick):
            i = n % len(sessions)
            n += 1
            if cursor[i] < len(events[i]):
                producer.produce(topic, key=sessions[i].id.encode(), value=events[i][cursor[i]])
                if i == 0:
                    probe_seq = cursor[i]
                cursor[i] += 1
        producer.commit_transaction(30)
        if probe_seq is not None:
            committed[probe_seq] = time.perf_counter()
        time.sleep(max(0.0, started + (n / rate) - time.perf_counter()))
    time.sleep(1.0)
    stop.set()
    watcher.join(5)
    process.terminate()
    process.wait(30)
    delete_prefix(client, f"bench-{run}")
    return [visible[s] - t for s, t in committed.items() if s in visible]


class _Acks:
    """The counted appends' outcomes, taken in their done callbacks so that the futures (and
    the events they hold) are not kept: a benchmark holding 15,000 of them has gen-2
    collections of 40-80 ms in the middle of what it measures (3 of 3 runs, 4 Dec 2026)."""

    def __init__(self) -> None:
        self.sent: dict[tuple[int, int], float] = {}  # (session index, seq) → sent at
        self.round_trips: list[float] = []  # append → committed reply, s
        self.errors: list[BaseException] = []
        self._outstanding = 0
        self._changed = threading.Condition()

    def track(self, i: int, t0: float, fut: Future[Any]) -> None:
        with self._changed:
            self._outstanding += 1
        fut.add_done_callback(partial(self._done, i, t0))

    def _done(self, i: int, t0: float, fut: Future[Any]) -> None:
        now = time.perf_counter()
        with self._changed:
            try:
                self.sent[(i, fut.result().seq)] = t0
                self.round_trips.append(now - t0)
            except Exception as exc:  # re-raised by wait()
                self.errors.append(exc)
            self._outstanding -= 1
            self._changed.notify_all()

    def wait(self, timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self._outstanding == 0, timeout):
                raise TimeoutError(f"{self._outstanding} appends unanswered after {timeout} s")
        if self.errors:
            raise self.errors[0]


def end_to_end(
    kafka: KafkaSettings,
    redis_url: str,
    rate: int,
    seconds: float,
    partitions: int,
    warmup: float = 2.0,
    client_linger_ms: float = 5.0,
    writer_env: Sequence[str] = (),
) -> tuple[list[tuple[float, float]], list[float], PressureSampler, ClientGcPauses]:
    """``SessionClient.append_async`` → writer (`dsh writer`, its own process) → events →
    `dsh project surface` (its own process) → the event's seq visible as applied in Redis.
    20 sessions, `rate` appends/s in total, one turn open per session. The client batches
    its commands for ``client_linger_ms``, as one sending this many appends should (see
    ``SessionClient``). Returns (sent at, seconds until visible) per append, the client's
    round trips, the machine's stalls over the run and this process's collections in the
    counted part."""
    from deploy.local.processes import free_ports
    from producers import SessionClient

    run = uuid.uuid4().hex[:8]
    # Topics of its own: the writer restores its partitions from the events topic at start.
    kafka = kafka.model_copy(update={"topic_prefix": f"bench-e2e-{run}.dsh.session"})
    ensure_topics(kafka, partitions)
    base = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    base.update(
        DSH_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
        DSH_KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
    )
    writer = subprocess.Popen(
        [sys.executable, "-m", "cli", "writer"],
        env={
            **base,
            "DSH_WRITER_GROUP_ID": f"bench-w-{run}",
            "DSH_WRITER_METRICS_PORT": str(free_ports(1)[0]),
            **{key: value for key, _, value in (item.partition("=") for item in writer_env)},
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    projector = subprocess.Popen(
        [sys.executable, "-m", "cli", "project", "surface"],
        env={
            **base,
            "DSH_REDIS_URL": redis_url,
            "DSH_PROJECTOR_GROUP_PREFIX": f"bench-{run}",
            "DSH_PROJECTOR_KEY_PREFIX": f"bench-{run}",
            "DSH_PROJECTOR_POLL_TIMEOUT_S": "0.05",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis.from_url(redis_url)
    sessions = [f"e2e-{run}-{i}" for i in range(20)]
    meta = [f"bench-{run}:{{{sid}}}:surface:meta" for sid in sessions]
    acks = _Acks()
    visible: dict[tuple[int, int], float] = {}
    stop = threading.Event()

    # One command and one reply per look at all sessions, not one per session: the watcher
    # shares the 2 cores with what it measures.
    applied_of = client.register_script(
        "local r = {} for i, k in ipairs(KEYS) do "
        "r[i] = redis.call('HGET', k, 'applied') or false end return r"
    )

    def watch() -> None:
        seen = [-1] * len(sessions)
        while not stop.is_set():
            values = applied_of(keys=meta)
            now = time.perf_counter()
            for i, value in enumerate(values):
                applied = -1 if value is None else int(value)
                for seq in range(seen[i] + 1, applied + 1):
                    visible[(i, seq)] = now
                seen[i] = max(seen[i], applied)
            time.sleep(0.001)

    pressure = PressureSampler(clock=time.perf_counter)
    client_gc = ClientGcPauses()
    try:
        with SessionClient(settings=kafka, linger_ms=client_linger_ms) as sc, pressure:
            for sid in sessions:  # warm up: writer owns its partitions, projector joined
                sc.append(sid, "turn/start", {"turn": 1})
            deadline = time.monotonic() + 60
            while client.hget(meta[-1], "applied") is None and time.monotonic() < deadline:
                time.sleep(0.05)
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            # What set-up left in this process is not walked by a collection in the middle
            # of the measurement (this process is the client and the watcher both).
            gc.collect()
            gc.freeze()
            # Paced like the counted part, not counted: a new topic's partitions are slow at
            # the broker for their first second of writes (see bench/writer_bench.py).
            counted_from = time.perf_counter() + warmup
            started = time.perf_counter()
            n = 0
            while time.perf_counter() - started < warmup + seconds:
                i = n % len(sessions)
                data = {
                    "id": f"u{n}",
                    "role": "user",
                    "source": {"kind": "user"},
                    "content": [{"type": "text", "text": f"message {n}"}],
                }
                t0 = time.perf_counter()
                fut = sc.append_async(sessions[i], "user/message", data, surface_op="append")
                if t0 >= counted_from:
                    client_gc.start()
                    acks.track(i, t0, fut)
                n += 1
                time.sleep(max(0.0, started + n / rate - time.perf_counter()))
            acks.wait(30)
            client_gc.stop()
            time.sleep(1.0)
            stop.set()
            watcher.join(5)
    finally:
        for process in (projector, writer):
            process.terminate()
            process.wait(30)
        delete_prefix(client, f"bench-{run}")
    timed = [(t, visible[k] - t) for k, t in acks.sent.items() if k in visible]
    return timed, acks.round_trips, pressure, client_gc


def large_replays(
    args: argparse.Namespace, redis_settings: RedisSettings, sessions: list[dsh.Session]
) -> dict[str, Any]:
    """Replay rates over a topic of ``args.replay_copies`` copies of the workload (the copies'
    sessions renamed, interleaved as in the small topic)."""
    kafka = KafkaSettings(
        bootstrap_servers=args.bootstrap, topic_prefix=f"bench-{uuid.uuid4().hex[:8]}.dsh.session"
    )
    ensure_topics(kafka, args.partitions)
    records = [
        (seq, sid, encode(sid, e.to_json()))
        for copy in range(args.replay_copies)
        for s in sessions
        for sid in (f"{s.id}-copy{copy}",)
        for seq, e in enumerate(s.events())
    ]
    records.sort(key=lambda r: (r[0], r[1]))
    publish(kafka, [(sid, value) for _, sid, value in records])
    out: dict[str, Any] = {"replay_large_records": len(records)}
    for name in PROJECTIONS:
        out[f"replay_large_{name}_records_per_s"] = round(
            replay_rate(kafka, redis_settings, (name,))
        )
    out["replay_large_surface_one_process_records_per_s"] = round(
        replay_rate(kafka, redis_settings, ("surface",), workers=1)
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
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
    args = parser.parse_args()
    # DSH_CODEC_NATIVE=off: the codec's Python readers here and in the services started.
    configure_codec()

    kafka = KafkaSettings(
        bootstrap_servers=args.bootstrap, topic_prefix=f"bench-{uuid.uuid4().hex[:8]}.dsh.session"
    )
    redis_settings = RedisSettings(url=SecretStr(args.redis_url))
    ensure_topics(kafka, args.partitions)
    if args.only_end_to_end:
        args.sessions = 0
    sessions = [session(f"s{i}", args.turns) for i in range(args.sessions)]
    values = [(s.id, encode(s.id, e.to_json())) for s in sessions for e in s.events()]
    # Interleave sessions as concurrent writers would.
    values.sort(key=lambda v: (int(decode(v[0].encode(), v[1], 0, 0).seq), v[0]))  # type: ignore[union-attr]
    total = len(values)
    out: dict[str, Any] = {"events": total, "sessions": args.sessions}
    out["codec_native"] = native.available()
    for name in PROJECTIONS if total else ():
        if name == PROJECTIONS[0]:
            publish(kafka, values)
        rate, cpu = throughput(kafka, redis_settings, name, total)
        out[f"{name}_events_per_s"] = round(rate)
        out[f"{name}_cpu_us_per_event"] = round(cpu * 1e6, 1)
        out[f"{name}_raw_redis_events_per_s"] = round(
            raw_write(kafka, redis_settings, name, values)
        )
    for name in PROJECTIONS if total else ():
        out[f"replay_{name}_records_per_s"] = round(replay_rate(kafka, redis_settings, (name,)))
    if total:
        out["replay_surface_one_process_records_per_s"] = round(
            replay_rate(kafka, redis_settings, ("surface",), workers=1)
        )
        out["replay_all_three_records_per_s"] = round(
            replay_rate(kafka, redis_settings, PROJECTIONS)
        )
    if total and args.replay_copies > 1:
        out.update(large_replays(args, redis_settings, sessions))
    lat = [] if args.only_end_to_end else latency(kafka, args.redis_url, 1000, args.latency_seconds)
    if lat:
        q = statistics.quantiles(lat, n=100)
        out["latency_samples"] = len(lat)
        out["latency_p50_ms"] = round(statistics.median(lat) * 1000, 1)
        out["latency_p99_ms"] = round(q[98] * 1000, 1)
    if not args.skip_end_to_end:
        # A steady 1,000/s, not the write-back of the phases before it: the records they
        # published (hundreds of MB) go to disk now, not 30 s later in the middle of it.
        os.sync()
        timed, acked, pressure, client_gc = end_to_end(
            kafka,
            args.redis_url,
            1000,
            args.latency_seconds,
            args.partitions,
            client_linger_ms=args.client_linger_ms,
            writer_env=args.writer_env,
        )
        if acked:
            out["e2e_client_ack_p50_ms"] = round(statistics.median(acked) * 1000, 1)
            out["e2e_client_ack_p99_ms"] = round(statistics.quantiles(acked, n=100)[98] * 1000, 1)
        out["e2e_client_gc_by_generation"] = client_gc.by_generation
        out["e2e_client_gc_longest_ms"] = round(client_gc.longest_ms, 1)
        e2e = [seconds for _, seconds in timed]
        if e2e:
            worst = slowest_second([(t, s * 1000) for t, s in timed], pressure, E2E_SLOW_MS)
            out["e2e_slowest_second"] = describe(worst, E2E_SLOW_MS)
            q = statistics.quantiles(e2e, n=100)
            out["e2e_samples"] = len(e2e)
            out["e2e_p50_ms"] = round(statistics.median(e2e) * 1000, 1)
            out["e2e_p99_ms"] = round(q[98] * 1000, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
