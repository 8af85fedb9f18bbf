"""Reading partitions of a topic to an end: restores, rebuilds, verify, replay and export.

One reader for all of them. Each partition is read (``read_committed`` by whoever made the
consumer) from a start offset to an end, which is either an offset (a restore reads to the
*high watermark* it read first: a transaction a dead or paused owner left open then holds the
position below it until that transaction ends, so nothing is served from a log that may still
grow behind the reader's back) or the end as of now (the broker's end-of-partition event, at
the last stable offset: a rebuild does not wait for open transactions, the live path applies
what they commit later). Progress is the consumer's position, since aborted records and
transaction markers are never returned; a read that makes none for ``stall_timeout_s`` fails
with ``READ_STUCK``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterator, Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from dsh.errors import SessionError, register_error

# Read to the end as of now (the end-of-partition event) rather than to an offset.
NOW = None


@register_error
class PartitionReadError(SessionError):
    """``READ_STUCK`` (no progress for the stall timeout: a transaction left open, or the
    broker went away) or ``READ_FAILED`` (the consumer reported an error)."""

    default_code = "READ_STUCK"


def fetched(consumer: Consumer, max_records: int, wait_s: float) -> list[Message]:
    """Up to ``max_records`` records (and events) the consumer has already fetched, without
    waiting; on an empty queue, the first one to come within ``wait_s``. ``consume(n, t)``
    returns only once it has n or t has passed, so a reader to the end of a partition, whose
    tail never fills the batch, waited out all of t there (200 ms in every restore)."""
    batch = consumer.consume(max_records, 0)
    if batch:
        return batch
    first = consumer.poll(wait_s)
    return [first] if first is not None else []


def refresh_metadata(client: Consumer, topic: str) -> None:
    with contextlib.suppress(KafkaException):  # the caller's own retry reports what is wrong
        client.list_topics(topic, timeout=5.0)


def watermarks(
    probe: Consumer, topic: str, partition: int, timeout_s: float = 10.0
) -> tuple[int, int]:
    """The partition's first offset and its end, asked of the broker (not a cache). Asked of a
    read_uncommitted ``probe``, the end is the high watermark, past any open transaction; a
    read_committed consumer answers the last stable offset."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = probe.get_watermark_offsets(TopicPartition(topic, partition), 5.0, False)
            return int(low), int(high)
        except KafkaException as exc:
            # Leadership moves (a new topic, a broker restart) pass: ask again until the deadline.
            if time.monotonic() > deadline:
                raise
            if exc.args[0].code() == KafkaError._UNKNOWN_PARTITION:
                # librdkafka answers this from its metadata cache without asking again, and
                # a broker that has just restarted can describe the topic with partitions
                # missing: that answer would stay cached for metadata.max.age.ms (15 min).
                # Asking for the topic's metadata replaces the cached entry.
                refresh_metadata(probe, topic)
            time.sleep(0.1)


def high_watermark(probe: Consumer, topic: str, partition: int, timeout_s: float = 10.0) -> int:
    """The partition's end (see :func:`watermarks`)."""
    return watermarks(probe, topic, partition, timeout_s)[1]


def low_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's first offset as a number, or OFFSET_BEGINNING if it cannot be asked:
    assigned at OFFSET_BEGINNING, librdkafka takes about half a second to fetch a record."""
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    except KafkaException:
        return OFFSET_BEGINNING
    return int(low) if low >= 0 else OFFSET_BEGINNING


def read_partitions(
    consumer: Consumer,
    topic: str,
    ranges: Mapping[int, tuple[int | None, int | None]],
    stall_timeout_s: float,
    on_end: Callable[[int, int], None] | None = None,
) -> Generator[Message, None, None]:
    """Every record of ``topic`` in ``ranges`` (partition: (start, end)): from ``start`` (None:
    the first offset there is) up to ``end`` exclusive (:data:`NOW`: the end as of now).
    Records of one partition come in offset order; partitions interleave. ``on_end(p, offset)``
    runs once p is done, with the offset its next record will have. The consumer must report
    partition ends (``enable.partition.eof``) and start from the earliest offset when a start
    is gone (``auto.offset.reset``), as :func:`servicekit.kafka_clients.reader` does; it is
    assigned here and unassigned after."""
    pending: dict[int, int | None] = {}
    starts: list[TopicPartition] = []
    for p, (start, end) in ranges.items():
        first = low_watermark(consumer, topic, p) if start is None else start
        if end is not NOW and first >= end:
            if on_end is not None:
                on_end(p, end)
            continue
        pending[p] = end
        starts.append(TopicPartition(topic, p, first))
    if not pending:
        return
    consumer.assign(starts)
    try:
        yield from _read(consumer, topic, pending, stall_timeout_s, on_end)
    finally:
        consumer.unassign()


def _read(
    consumer: Consumer,
    topic: str,
    pending: dict[int, int | None],
    stall_timeout_s: float,
    on_end: Callable[[int, int], None] | None,
) -> Iterator[Message]:
    def done(p: int, offset: int) -> None:
        del pending[p]
        if on_end is not None:
            on_end(p, offset)

    deadline = time.monotonic() + stall_timeout_s
    while pending:
        moved = False
        for m in fetched(consumer, 1000, 0.1):
            p, offset = m.partition() or 0, m.offset() or 0
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise PartitionReadError(f"reading {topic}: {err.str()}", code="READ_FAILED")
                if p in pending:
                    end = pending[p]
                    if end is NOW:
                        done(p, offset)
                        moved = True
                    elif offset >= end:
                        done(p, end)
                        moved = True
                continue
            end = pending.get(p, -1)
            if end is NOW or (end is not None and 0 <= offset < end):
                moved = True
                yield m
        # Aborted records and transaction markers are never returned: the position says how
        # far a partition really is.
        bounded = [TopicPartition(topic, p) for p, end in pending.items() if end is not NOW]
        if bounded:
            for tp in consumer.position(bounded):
                end = pending.get(tp.partition)
                if end is not None and tp.offset >= end:
                    done(tp.partition, end)
                    moved = True
        if moved:
            deadline = time.monotonic() + stall_timeout_s
        elif time.monotonic() > deadline:
            raise PartitionReadError(
                f"{topic}: no progress for {stall_timeout_s:g}s on partitions "
                f"{sorted(pending)} (a transaction left open, or the broker went away)",
                code="READ_STUCK",
            )
