"""One ``dsh export`` run: lock the directory, roll the checkpoint forward, read each partition
from its checkpoint to the end as of the start of the run, write the files under temporary names,
commit the checkpoint with the renames it owes, rename.

The run is the same for every format; what goes into a file is its format's sink
(:mod:`.formats`). Every record is decoded once, for its date and so an undecodable record stops
the export (naming its partition and offset) instead of reaching the files.
"""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from confluent_kafka import Consumer

from dsh.errors import SessionError
from dsh.formats.jsonl import fsync_directory
from projectors.export.budget import Budget, ExportSettings, split
from projectors.export.errors import (
    ExportBusyError,
    ExportDirectoryError,
    ExportManifestError,
    ExportRecordError,
)
from projectors.export.files import (
    Exported,
    PartFile,
    date_of_day,
    part_files,
    remove_temporaries,
)
from projectors.export.formats import AVRO_CODECS, ExportFormat, resolve
from projectors.export.manifest import MANIFEST, Manifest
from schemas import HEADER_INHERITED, decode_event
from schemas.records import default_codec
from servicekit import kafka_clients
from servicekit.partition_reader import PartitionReadError, read_partitions, watermarks
from servicekit.progress import Progress
from servicekit.settings import KafkaSettings
from servicekit.topics import leading_brokers, topic_metadata

log = logging.getLogger("projectors")

LOCK = "_lock"
CODECS = AVRO_CODECS
# A new file is started past this size (it keeps files easy to move and split).
FILE_MAX_BYTES = 256 * 1024 * 1024
_DAY_MS = 86_400_000


@dataclass
class ExportResult:
    directory: str
    topic: str
    format: str = "avro"
    records: int = 0
    files: list[str] = field(default_factory=list)  # relative to the directory
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition: [from, to)
    skipped: dict[int, int] = field(default_factory=dict)  # offsets lost to retention
    bytes: int = 0
    buffered_peak: int = 0  # the most bytes of rows held in memory at once, all files together
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "topic": self.topic,
            "format": self.format,
            "records": self.records,
            "files": self.files,
            "ranges": {str(p): list(r) for p, r in sorted(self.ranges.items())},
            "skipped": {str(p): n for p, n in sorted(self.skipped.items())},
            "bytes": self.bytes,
            "bufferedPeakBytes": self.buffered_peak,
            "seconds": round(self.seconds, 3),
            "recordsPerSecond": round(self.records / self.seconds) if self.seconds else 0,
        }


# -- Kafka --------------------------------------------------------------------------------


_INHERITED = (HEADER_INHERITED, b"1")


def _read(
    consumer: Consumer, topic: str, ranges: dict[int, tuple[int, int]], timeout_s: float
) -> Iterator[tuple[int, int, bytes, bool]]:
    """(partition, offset, value, inherited) of every committed record in ``ranges`` ([start,
    end) per partition), partitions interleaved, each in offset order."""
    try:
        for m in read_partitions(consumer, topic, dict(ranges), timeout_s):
            headers = m.headers()
            inherited = headers is not None and _INHERITED in headers
            yield m.partition() or 0, m.offset() or 0, m.value() or b"", inherited
    except PartitionReadError as exc:
        raise PartitionReadError(
            f"{exc.message}; nothing of this run was committed, re-run to retry", code=exc.code
        ) from None


# -- the run ------------------------------------------------------------------------------


def _locked(root: Path) -> BinaryIO:
    """``root``, made if need be, and its lock file opened (not yet taken)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        return open(root / LOCK, "a+b")
    except OSError as exc:
        raise ExportDirectoryError(
            f"{root}: cannot export into it ({exc.strerror or exc}); name a directory you may "
            "write, or one that does not exist yet",
            code="EXPORT_DIR_INVALID",
        ) from None


def export(
    directory: str | Path,
    *,
    kafka: KafkaSettings | None = None,
    from_beginning: bool = False,
    format: str = "avro",
    codec: str | None = None,
    connect_timeout: float = 10.0,
    timeout: float = 60.0,
    buffer_bytes: int | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Export what the events topic holds beyond ``directory``'s checkpoint (everything with
    ``from_beginning``, which replaces the directory's files), in ``format`` (one of
    :data:`~projectors.export.formats.FORMATS`) compressed with ``codec`` (default: the
    format's first). ``connect_timeout`` bounds the first contact with the broker, ``timeout``
    a read that makes no progress. ``buffer_bytes`` bounds what the run holds in memory, the rows
    of all partitions and the consumer's prefetch (default: ``DSH_EXPORT_BUFFER_BYTES``; how it
    is shared, by the brokers leading the topic at the start of the run:
    :func:`~projectors.export.budget.split`)."""
    fmt, codec = resolve(format, codec)
    setting = ExportSettings().buffer_bytes if buffer_bytes is None else buffer_bytes
    started = time.perf_counter()
    kafka = kafka or KafkaSettings()
    topic = kafka.topic("events")
    root = Path(directory)
    with _locked(root) as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ExportBusyError(
                f"{root}: another `dsh export` is writing this directory", code="EXPORT_BUSY"
            ) from None
        manifest = Manifest.load(root)
        if manifest is not None:
            if manifest.topic != topic:
                raise ExportManifestError(
                    f"{root} holds an export of {manifest.topic}, not {topic}; "
                    "export into another directory",
                    code="MANIFEST_TOPIC",
                )
            if manifest.export_format != fmt.name:
                raise ExportManifestError(
                    f"{root} holds a --format {manifest.export_format} export, not "
                    f"{fmt.name}; export into another directory",
                    code="MANIFEST_FORMAT",
                )
            manifest.roll_forward(root)
        remove_temporaries(root)
        result = ExportResult(str(root), topic, fmt.name)
        described = topic_metadata(kafka, [topic], connect_timeout, quiet=True)[topic]
        count = len(described.partitions)
        leaders = leading_brokers(described)
        shares = split(setting, leaders)
        log.info(
            "export of %s: %d partitions led by %d broker(s); of %d bytes, rows %d, "
            "librdkafka's queue %d and a fetch of %d per leader",
            topic,
            count,
            leaders,
            setting,
            shares.rows,
            shares.queue,
            shares.fetch,
        )
        consumer = kafka_clients.reader(kafka, topics=(topic,), **shares.consumer_config())
        try:
            _run(
                root,
                consumer,
                topic,
                count,
                manifest,
                from_beginning,
                fmt,
                codec,
                timeout,
                Budget(shares.rows),
                result,
                progress,
            )
        finally:
            consumer.close()
    result.seconds = time.perf_counter() - started
    return result


def _run(
    root: Path,
    consumer: Consumer,
    topic: str,
    count: int,
    manifest: Manifest | None,
    from_beginning: bool,
    fmt: ExportFormat,
    codec: str,
    timeout: float,
    budget: Budget,
    result: ExportResult,
    progress: Progress | None,
) -> None:
    committed = {} if manifest is None or from_beginning else dict(manifest.offsets)
    stale = [p for p in committed if p >= count]
    ranges: dict[int, tuple[int, int]] = {}
    for p in range(count):
        low, high = watermarks(consumer, topic, p)
        start = committed.get(p, low)
        if start > high:
            stale.append(p)
        if start < low:  # retention removed records never exported (events are kept forever)
            result.skipped[p] = low - start
            start = low
        ranges[p] = (start, high)
    if stale:
        raise ExportManifestError(
            f"{root / MANIFEST} is ahead of {topic} on partitions {sorted(stale)} (the topic was "
            "recreated, or this is another cluster); re-export with --from-beginning or into "
            "a new directory",
            code="MANIFEST_AHEAD",
        )
    total = sum(end - start for start, end in ranges.values())
    open_files: dict[int, PartFile] = {}
    done: list[PartFile] = []
    codec_ = default_codec()
    committed_run = False
    try:
        for p, offset, value, inherited in _read(consumer, topic, ranges, timeout):
            try:
                record = decode_event(value, codec=codec_)
            except SessionError as exc:
                raise _undecodable(topic, p, offset, exc) from exc
            date = date_of_day(int(record.event["time"]) // _DAY_MS)
            part = open_files.get(p)
            if part is not None and (part.date != date or part.size() >= FILE_MAX_BYTES):
                # One open file per partition: a partition's records are (nearly) in time
                # order, so a date change closes the day's file rather than holding many open.
                result.bytes += part.close()
                budget.closed(p)
                done.append(part)
                part = None
            if part is None:
                part = open_files[p] = PartFile(root, date, p, offset, fmt.ext, fmt.sink, codec)
            try:
                part.add(Exported(p, offset, value, record, inherited))
            except SessionError as exc:  # a record of an older schema that does not re-encode
                raise _undecodable(topic, p, offset, exc) from exc
            budget.added(p, open_files)
            result.records += 1
            if progress is not None and result.records % 10_000 == 0:
                progress(result.records, total)
        for part in open_files.values():
            result.bytes += part.close()
            done.append(part)
        open_files.clear()
        result.buffered_peak = budget.peak
        for d in {part.dir for part in done}:
            fsync_directory(d)  # the temporaries are durable before the checkpoint names them
        new = Manifest(
            topic,
            {p: end for p, (_, end) in ranges.items()},
            [(str(part.tmp.relative_to(root)), part.final_name) for part in done],
            [str(f.relative_to(root)) for f in part_files(root, fmt.ext)] if from_beginning else [],
            fmt.name,
        )
        if manifest is None or new.offsets != manifest.offsets or new.renames or new.deletes:
            new.save(root)  # the commit point
            committed_run = True
            new.roll_forward(root)
    except BaseException as exc:
        if not committed_run:  # after the commit the temporaries are owed: the next run renames
            for part in [*open_files.values(), *done]:
                part.discard()
        if isinstance(exc, OSError):  # a full disk, a path in the way
            raise _unwritable(root, exc, committed_run) from exc
        raise
    if progress is not None:
        progress(result.records, result.records)  # the estimate counted transaction markers
    result.files = sorted(part.final_name for part in done)
    result.ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}


def _unwritable(root: Path, exc: OSError, committed: bool) -> ExportDirectoryError:
    where = f" ({exc.filename})" if exc.filename else ""
    outcome = (
        "the checkpoint is committed: the next run finishes its renames"
        if committed
        else "nothing of this run was committed: free the space or clear the path, and re-run"
    )
    return ExportDirectoryError(
        f"{root}: cannot write the export: {exc.strerror or exc}{where}; {outcome}",
        code="EXPORT_WRITE_FAILED",
    )


def _undecodable(topic: str, p: int, offset: int, exc: SessionError) -> ExportRecordError:
    return ExportRecordError(
        f"{topic}[{p}] offset {offset}: {type(exc).__name__} [{exc.code}]: {exc.message}; "
        "nothing of this run was committed (a newer schema needs a newer dsh; a corrupt record "
        "needs an operator)",
        code="RECORD_UNDECODABLE",
    )
