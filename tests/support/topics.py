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
    """``records`` events of ``data_bytes`` on each partition of the events topic, produced as
    a writer would (one transaction, encoded events; session ``events-<partition>``), no writer
    needed; returns once every partition's end is past them."""
    from confluent_kafka import Producer

    import dsh
    from schemas import encode_event
    from servicekit import kafka_clients
    from servicekit.partition_reader import watermarks
    from tests.support.builders import user
    from tests.support.waiting import wait_for

    producer = Producer(
        {**kafka.client_config(), "transactional.id": f"test-events-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    topic = kafka.topic("events")
    for seq in range(records):
        for p in range(partitions):
            sid = f"events-{p}"
            event = dsh.Event.from_json(
                {"type": "user/message", "seq": seq, "time": 1, "data": user("x" * data_bytes)}
            )
            producer.produce(topic, encode_event(event, sid), key=sid.encode(), partition=p)
            producer.poll(0)  # delivery reports: a large batch fills librdkafka's queue
    producer.commit_transaction(30)
    # The commit returns before every partition has its marker: until then its last stable
    # offset, where an export stops, is still before the records.
    probe = kafka_clients.reader(kafka, topics=(topic,))
    ends = dict.fromkeys(range(partitions), -1)  # partition → its end last asked

    def short() -> list[int]:
        for p in [p for p, end in ends.items() if end <= records]:
            ends[p] = watermarks(probe, topic, p)[1]  # past the records and the marker
        return [p for p, end in ends.items() if end <= records]

    try:
        # The coordinator writes the markers after the commit returns: in one CI run, 30 s
        # did not see all 48 of them. An end past them counts too, and a timeout says which.
        wait_for(
            lambda: not short(),
            timeout_s=90,
            what="the transaction's markers on every partition",
            explain=lambda: f"ends (partition: offset) {[(p, ends[p]) for p in short()]}",
        )
    finally:
        probe.close()
