"""Topics of a test's own: a fresh prefix, so no test sees another's records."""

from __future__ import annotations

import uuid

from servicekit.settings import KafkaSettings
from servicekit.topics import ensure_topics


def fresh_topics(bootstrap_servers: str, partitions: int, name: str = "test") -> KafkaSettings:
    """Settings under a new ``<name>-<random>.dsh.session`` prefix, its topics created."""
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap_servers,
        topic_prefix=f"{name}-{uuid.uuid4().hex[:12]}.dsh.session",
    )
    ensure_topics(kafka, partitions)
    return kafka


def committed_events(kafka: KafkaSettings, partitions: int, records: int, data_bytes: int) -> None:
    """``records`` events of ``data_bytes`` on each partition of the events topic, encoded as a
    writer encodes them (session ``events-<partition>``), no writer needed; returns once every
    partition's end is past them.

    Produced without a transaction: what the export reads is the same, and its end is there
    once the broker acknowledged them. With one, the transaction's marker on one partition of
    48 did not appear within 90 s, twice in CI on a broker other test modules had used (never
    seen alone)."""
    from confluent_kafka import Producer

    import dsh
    from schemas import encode_event
    from servicekit import kafka_clients
    from servicekit.partition_reader import watermarks
    from tests.support.builders import user
    from tests.support.waiting import wait_for

    producer = Producer({**kafka.client_config(), "enable.idempotence": True})
    topic = kafka.topic("events")
    for seq in range(records):
        for p in range(partitions):
            sid = f"events-{p}"
            event = dsh.Event.from_json(
                {"type": "user/message", "seq": seq, "time": 1, "data": user("x" * data_bytes)}
            )
            producer.produce(topic, encode_event(event, sid), key=sid.encode(), partition=p)
            producer.poll(0)  # delivery reports: a large batch fills librdkafka's queue
    assert producer.flush(30) == 0, "records left undelivered"
    probe = kafka_clients.reader(kafka, topics=(topic,))
    ends = dict.fromkeys(range(partitions), -1)  # partition → its end last asked

    def short() -> list[int]:
        for p in [p for p, end in ends.items() if end < records]:
            ends[p] = watermarks(probe, topic, p)[1]
        return [p for p, end in ends.items() if end < records]

    try:
        wait_for(
            lambda: not short(),
            what="the records on every partition",
            explain=lambda: f"ends (partition: offset) {[(p, ends[p]) for p in short()]}",
        )
    finally:
        probe.close()
