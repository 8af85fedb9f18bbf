"""Read sessions back from the events topic (read_committed), for rebuilds and ``dsh verify``.

A session lives on one partition (``partition_for``); reading it means scanning that partition
from the start and keeping the records keyed by it. Rebuilds batch every session of a
partition into one scan.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

from projectors.records import Poison, Record, decode
from schemas import created_bare
from servicekit import kafka_clients
from servicekit.partition_reader import NOW, read_partitions, watermarks
from servicekit.partitioning import partition_for
from servicekit.progress import Progress
from servicekit.settings import KafkaSettings
from servicekit.topics import partition_counts


def scan_partitions(
    kafka: KafkaSettings,
    topic: str,
    partitions: Iterable[int],
    timeout_s: float = 30.0,
    on_end: Callable[[int, int], None] | None = None,
    start: Mapping[int, int] | None = None,
    *,
    one_at_a_time: bool = False,
) -> Iterator[Record | Poison]:
    """Every committed record of the given partitions up to their ends as of now, through one
    consumer (setting one up costs more than reading thousands of records), from each one's
    ``start`` offset if given, else its first. Records of one partition come in order;
    partitions interleave, unless ``one_at_a_time`` (a caller that holds each partition's
    records until its end holds one partition's, not the whole topic's); ``on_end(p, end)``
    runs when p's end is reached, with the offset the next record will have."""
    starts = start or {}
    consumer = kafka_clients.reader(kafka, topics=(topic,))
    ranges = {p: (starts.get(p), NOW) for p in partitions}
    shares = [{p: r} for p, r in ranges.items()] if one_at_a_time else [ranges]
    try:
        for share in shares:
            for m in read_partitions(consumer, topic, share, timeout_s, on_end):
                item = decode(m.key(), m.value(), m.partition() or 0, m.offset() or 0)
                if type(item) is Record and item.event.seq == 0 and created_bare(m.headers()):
                    item = item._replace(bare=True)
                yield item
    finally:
        consumer.close()


def offsets_in(kafka: KafkaSettings, topic: str, partitions: Iterable[int]) -> int:
    """Offsets the partitions hold now: an estimate of their records from above (transaction
    markers and aborted records take offsets too), for a progress bar."""
    consumer = kafka_clients.reader(kafka)
    try:
        marks = [watermarks(consumer, topic, p) for p in partitions]
    finally:
        consumer.close()
    return sum(max(high - low, 0) for low, high in marks)


def read_sessions(
    kafka: KafkaSettings,
    topic: str,
    partition: int,
    session_ids: Collection[str],
    progress: Progress | None = None,
    beat: Callable[[], None] | None = None,
) -> dict[str, list[Record | Poison]]:
    """``progress(records, total)`` as the partition is scanned; last with the real count.
    ``beat()`` every thousand records: a service's liveness, as a scan of a large partition
    can outlast its stall bound while making progress (a stalled read fails on its own)."""
    wanted = set(session_ids)
    out: dict[str, list[Record | Poison]] = {sid: [] for sid in wanted}
    total = offsets_in(kafka, topic, [partition]) if progress is not None else 0
    records = 0
    for item in scan_partitions(kafka, topic, [partition]):
        records += 1
        if item.session_id in wanted:
            out[item.session_id].append(item)
        if records % 1_000 == 0:
            if beat is not None:
                beat()
            if progress is not None and records % 10_000 == 0:
                progress(records, total)
    if progress is not None:
        progress(records, records)
    return out


def read_session(
    kafka: KafkaSettings,
    session_id: str,
    topic: str | None = None,
    progress: Progress | None = None,
    connect_timeout: float = 10.0,
) -> list[Record | Poison]:
    """``connect_timeout``: how long the first contact with the broker may take (a command's
    ``--timeout``)."""
    topic = topic or kafka.topic("events")
    count = partition_counts(kafka, [topic], connect_timeout)[topic]
    partition = partition_for(session_id, count)
    return read_sessions(kafka, topic, partition, [session_id], progress)[session_id]
