"""From an event's commit to its seq visible as applied on the surface: a projector process
(`dsh project surface`) under a steady rate of transactions, as a writer would commit them."""

from __future__ import annotations

import time

import redis

from bench.redis_keys import AppliedWatcher, applied_key, delete_prefix, wait_until_applied
from bench.stack import run_id, start_projector, stop, transactional_producer
from bench.workload import session
from projectors.records import encode
from servicekit.settings import KafkaSettings


def latency(kafka: KafkaSettings, redis_url: str, rate: int, seconds: float) -> list[float]:
    """Commit of an event → its seq visible as applied on the surface, with a projector
    process (`dsh project surface`) under `rate` events/s spread over 50 sessions."""
    run = run_id()
    prefix = f"bench-{run}"
    process = start_projector(kafka, redis_url, prefix)
    client = redis.Redis.from_url(redis_url)
    sessions = [session(f"lat-{run}-{i}", 60) for i in range(50)]
    events = [[encode(s.id, e.to_json()) for e in s.events()] for s in sessions]
    producer = transactional_producer(
        kafka, f"bench-lat-{run}", {"linger.ms": 0, "retry.backoff.ms": 5}
    )
    topic = kafka.topic("events")
    probe = sessions[0].id
    committed: dict[int, float] = {}

    # Warm up: the projector joins its group and applies a first event of every session.
    producer.begin_transaction()
    for s, evs in zip(sessions, events, strict=True):
        producer.produce(topic, key=s.id.encode(), value=evs[0])
    producer.commit_transaction(30)
    wait_until_applied(client, applied_key(prefix, probe))
    with AppliedWatcher(client, prefix, [probe], interval=0.0005) as watcher:
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
    stop(process)
    delete_prefix(client, prefix)
    visible = watcher.visible
    return [visible[(0, s)] - t for s, t in committed.items() if (0, s) in visible]
