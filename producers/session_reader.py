"""A session read back from the events topic, as committed now (``SessionClient.read``)."""

from __future__ import annotations

from collections.abc import Mapping

import dsh
from dsh.projections import Interpreter
from dsh.restore import restore
from schemas import created_bare, decode_event_frozen
from servicekit import kafka_clients
from servicekit.partition_reader import high_watermark, read_partitions
from servicekit.settings import KafkaSettings


def read_session(
    kafka: KafkaSettings,
    events_topic: str,
    partition: int,
    session_id: str,
    timeout_s: float,
    interpreters: Mapping[str, Interpreter] | None = None,
) -> dsh.Session:
    """The session's events on its partition up to the last stable offset, restored exactly as
    logged, in the invariants mode its first event records (no end-of-session marker: the log
    goes on)."""
    reader = kafka_clients.reader(kafka, topics=(events_topic,))
    try:
        end = high_watermark(reader, events_topic, partition, timeout_s)  # read_committed: LSO
        key = session_id.encode()
        events = []
        invariants = True
        for m in read_partitions(reader, events_topic, {partition: (None, end)}, timeout_s):
            if m.key() == key:
                event = decode_event_frozen(m.value() or b"").event
                if event["seq"] == 0:
                    invariants = not created_bare(m.headers())
                events.append(event)
    finally:
        reader.close()
    session = dsh.Session(session_id, invariants=invariants)
    return restore(session, events, interpreters, mark_end=False)
