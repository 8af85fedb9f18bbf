"""Events/s one projector applies from a topic already holding the workload, and the CPU it
spends per event; the topic is published here in large transactions."""

from __future__ import annotations

import threading
import time
import uuid

from bench.redis_keys import delete_prefix, settings_for
from bench.stack import run_id, transactional_producer
from cli.wiring import build_runtime
from servicekit.settings import KafkaSettings, RedisSettings


def publish(kafka: KafkaSettings, records: list[tuple[str, bytes]], per_txn: int = 2000) -> None:
    """(session id, encoded event) records to the events topic, ``per_txn`` a transaction."""
    producer = transactional_producer(
        kafka, f"bench-{uuid.uuid4().hex}", {"linger.ms": 5, "retry.backoff.ms": 5}
    )
    topic = kafka.topic("events")
    for i in range(0, len(records), per_txn):
        producer.begin_transaction()
        for sid, value in records[i : i + per_txn]:
            producer.produce(topic, key=sid.encode(), value=value)
        producer.commit_transaction(60)


def throughput(
    kafka: KafkaSettings, redis_settings: RedisSettings, name: str, total: int
) -> tuple[float, float]:
    """Events/s one projector applies, from its first applied event to its last, and the
    process CPU time per event over the same span (robust to a machine shared with others)."""
    run = run_id()
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
