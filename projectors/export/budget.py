"""The export's memory: one setting, ``DSH_EXPORT_BUFFER_BYTES``, shared between the rows the
open files hold and the consumer that feeds them (:func:`split`).

A run keeps one file open per partition, and each sink holds its rows until a row group (or an
Avro block) is full. Alone, each is bounded; together they grew with the partition count (48
partitions of full Parquet row groups were over 1.5 GB). :class:`Budget` keeps their sum under
the rows' share: past it, the file holding the most writes it out. The consumer's share sizes
librdkafka's prefetch, which by its defaults is 64 MiB of queue and 50 MiB fetches whatever the
setting, a fetch in flight to each broker leading partitions of the topic."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from projectors.export.files import PartFile
from servicekit.settings import StrictSettings

MIB = 1024 * 1024

# The split of the setting, decided here only. librdkafka (2.x: rdkafka_fetcher.c, and
# librdkafka#4137) puts the records of every partition the export assigns in one queue, and a
# broker's fetch asks for a partition only while that queue is under its limit
# (queued.max.messages.kbytes); each broker has one fetch in flight at a time, and its response
# lands whole. So librdkafka holds at most the queue plus one response per broker leading
# partitions of the topic, each at most fetch.max.bytes (a first record batch over it comes
# whole, but no batch is over ~1 MiB, the floor below); and the batch the export has taken out
# of the queue (up to 1000 records) is at most what was queued: 2 x (queue + leaders x fetch).
# That sum is 1/8 of the setting: the fetches in flight get 1/32, each leader its part of it,
# and the queue another 1/32 plus what the fetches leave. Where the fetch's floor makes them
# more (leaders x 1 MiB over 1/32), the queue gives way, down to its own floor, then the rows
# do, down to half. A fetch answers in milliseconds, so a deeper queue buys no speed (`python -m
# bench.export_bench`); the bound is tested with librdkafka's own statistics
# (tests/integration/test_analytics_export.py, and tests/integration/test_three_node_cluster.py
# with three leaders).
#
# The leaders are counted once, from the topic's metadata at the start of the export. Leadership
# moving meanwhile (a broker restarting) can hand partitions to a broker that led none; until
# the preferred leaders are back, each such broker can add two fetches to what the consumer holds.
PREFETCH_SHARE = 32
# librdkafka refuses a fetch.max.bytes under its message.max.bytes (1,000,000), and the broker
# sends a record batch of up to ~1 MiB (its max.message.bytes) whole whatever the fetch asks.
PREFETCH_FLOOR = MIB
# librdkafka's ranges (CONFIGURATION.md): past them it refuses to make the consumer.
_QUEUE_KBYTES_MAX = 2_097_151
_FETCH_MAX = 2_147_483_135
# Once its queue is over the limit librdkafka waits this long before fetching that partition
# again (default 1 s): with a queue a small setting makes, the export would wait a second at
# almost every refill. The wait is for the export to drain a queue of a few MiB: milliseconds.
QUEUE_FULL_BACKOFF_MS = 10


class ExportSettings(StrictSettings):
    """`dsh export DIR` (``DSH_EXPORT_*``)."""

    model_config = SettingsConfigDict(env_prefix="DSH_EXPORT_", extra="forbid", frozen=True)

    # 128 MiB: 112 MiB of rows, three and a half partitions' full Parquet row groups (32 MiB
    # each), 14 MiB per row group at the local stack's 8 partitions, and 16 MiB for the
    # consumer (up to 7 brokers leading the topic); room in a 512 MiB pod beside the
    # interpreter and pyarrow's working memory.
    buffer_bytes: Annotated[int, Field(ge=MIB)] = 128 * MIB
    """Most bytes the export holds: its Kafka consumer's prefetch (1/8, or 2 MiB per broker
    leading the topic plus 2 MiB if more) and the rows of all open files (the rest, at least
    half; past it, the largest is written out). Both fit from 4 MiB per leader plus 4 MiB up."""


@dataclass(frozen=True)
class Split:
    """What each part of the export may hold, in bytes: ``rows``, the open files' sinks (the
    limit of :class:`Budget`); ``queue``, the records librdkafka prefetched; ``fetch``, one
    fetch response, which each of the ``leaders`` may have in flight."""

    rows: int
    queue: int
    fetch: int
    leaders: int

    @property
    def consumer(self) -> int:
        """The most the consumer holds: librdkafka's queue with a response from each leader
        landed over it, and the batch the export took out of the queue."""
        return 2 * (self.queue + self.leaders * self.fetch)

    def consumer_config(self) -> dict[str, Any]:
        """The librdkafka settings of the export's consumer."""
        return {
            "queued.max.messages.kbytes": self.queue // 1024,
            "fetch.max.bytes": self.fetch,
            "fetch.queue.backoff.ms": QUEUE_FULL_BACKOFF_MS,
        }


def split(buffer_bytes: int, leaders: int) -> Split:
    """``buffer_bytes`` (``DSH_EXPORT_BUFFER_BYTES``) shared between the rows and a consumer
    fetching from ``leaders`` brokers (those leading partitions of the topic), the consumer
    first: it cannot go under its floors, and the rows keep at least half."""
    leaders = max(leaders, 1)  # none led at the start: the read waits for a leader, sized as one
    prefetch = max(buffer_bytes // PREFETCH_SHARE, PREFETCH_FLOOR)
    fetch = min(max(prefetch // leaders, PREFETCH_FLOOR), _FETCH_MAX)
    queue = min(max(2 * prefetch - leaders * fetch, PREFETCH_FLOOR) // 1024, _QUEUE_KBYTES_MAX)
    sized = Split(0, queue * 1024, fetch, leaders)
    return replace(sized, rows=max(buffer_bytes - sized.consumer, buffer_bytes // 2))


class Budget:
    """The bytes held by the open files' sinks, within ``limit`` after each record. ``peak`` is
    the most ever held (the record that went over included), as the sinks count it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: dict[int, int] = {}  # partition -> what its open file's sink holds
        self.total = 0
        self.peak = 0

    def added(self, partition: int, files: Mapping[int, PartFile]) -> None:
        """Account for a record just added to ``files[partition]``; write out the largest
        buffers until the total is within the limit."""
        self._update(partition, files[partition].sink.buffered())
        self.peak = max(self.peak, self.total)
        if self.total <= self.limit:
            return
        for largest in sorted(self.held, key=self.held.__getitem__, reverse=True):
            files[largest].sink.flush()
            self._update(largest, files[largest].sink.buffered())
            if self.total <= self.limit:
                return

    def closed(self, partition: int) -> None:
        """The partition's open file was closed: it holds nothing any more."""
        self.total -= self.held.pop(partition, 0)

    def _update(self, partition: int, held: int) -> None:
        self.total += held - self.held.get(partition, 0)
        self.held[partition] = held
