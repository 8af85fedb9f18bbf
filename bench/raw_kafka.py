"""The writer benchmark's raw ceiling: a bare transactional confluent-kafka producer on the
same broker in the same run, doing what the writer does with none of its work."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from functools import partial

from confluent_kafka import Consumer, TopicPartition

from bench.figures import percentile
from bench.pacing import paced_latency
from bench.stack import transactional_producer
from bench.workload import message
from dsh import Event
from schemas import encode_event
from servicekit.settings import KafkaSettings


def raw_ceiling(kafka: KafkaSettings, seconds: float, rate: float) -> dict[str, float]:
    """A bare transactional producer on the same broker: records/s in 1000-record
    transactions, and one-record transaction latency at ``rate``/s, without and with the
    consumed offsets sent to the transaction."""
    topic, commands = kafka.topic("events"), kafka.topic("commands")
    producer = transactional_producer(
        kafka, f"raw-{uuid.uuid4().hex}", {"retry.backoff.ms": 10, "linger.ms": 1}
    )
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

    def one_record(i: int, offsets_of: Consumer | None = None) -> Future[None]:
        """A one-record transaction; with ``offsets_of``, the writer's extra step too: the
        consumed offsets sent to the transaction with a group member's metadata
        (AddOffsetsToTxn + TxnOffsetCommit)."""
        fut: Future[None] = Future()
        with pool:
            producer.begin_transaction()
            producer.produce(topic, value, keys[i % 64])
            if offsets_of is not None:
                producer.send_offsets_to_transaction(
                    [TopicPartition(commands, 0, i + 1)], offsets_of.consumer_group_metadata(), 30
                )
            producer.commit_transaction(30)
        fut.set_result(None)
        return fut

    lat = paced_latency(one_record, rate, seconds)

    consumer = group_member(kafka, commands)

    lat_offsets = paced_latency(partial(one_record, offsets_of=consumer), rate, seconds)
    consumer.close()
    return {
        "events_per_s": throughput,
        "p50_ms": percentile(lat, 0.5),
        "p99_ms": percentile(lat, 0.99),
        "offsets_p50_ms": percentile(lat_offsets, 0.5),
        "offsets_p99_ms": percentile(lat_offsets, 0.99),
    }


def one_record_transactions(kafka: KafkaSettings, seconds: float) -> list[float]:
    """Closed loop for ``seconds``: one-record transactions with the consumed offsets sent to
    each (what one append costs the writer in Kafka calls), one after another; each in ms."""
    topic, commands = kafka.topic("events"), kafka.topic("commands")
    producer = transactional_producer(
        kafka, f"raw-{uuid.uuid4().hex}", {"retry.backoff.ms": 1, "linger.ms": 0}
    )
    value = encode_event(Event("user/message", 0, 0, message(0), "append"), "raw-session")
    consumer = group_member(kafka, commands)
    out = []
    i = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        producer.begin_transaction()
        producer.produce(topic, value, b"raw-session")
        producer.send_offsets_to_transaction(
            [TopicPartition(commands, 0, i + 1)], consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        out.append((time.perf_counter() - t0) * 1000)
        i += 1
    consumer.close()
    producer.flush(10)
    return out


def group_member(kafka: KafkaSettings, topic: str) -> Consumer:
    """A member of a group of its own, assigned ``topic``'s partitions: the group metadata a
    raw transaction sends its offsets with."""
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": f"raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    return consumer
