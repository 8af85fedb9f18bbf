"""``dsh export DIR``: the events topic as Avro object container files, for analytics engines.

Layout: ``DIR/date=YYYY-MM-DD/part-<partition>-<firstOffset>-<lastOffset>.avro`` (the UTC date of
the events' ``time``), each file a container with the ``dsh.v1.SessionEvent`` schema embedded,
so any Avro reader needs nothing else. ``DIR/_offsets.json`` is the checkpoint: per partition,
the next offset to export. Engines that skip ``_``/``.`` names (Spark, Hive, Trino, DuckDB
globs on ``part-*``) never see it or the temporary files.

Idempotent by offset ranges: a run reads each partition (``read_committed``) from its
checkpoint to the end as of the start of the run, writes files under temporary names and
fsyncs them, then commits the checkpoint *with the renames it owes* (``pending``), then renames.
A crash before the checkpoint commit leaves only temporary files (deleted by the next run,
which re-exports the same records); a crash after it is rolled forward by the next run. So a
record is in exactly one visible file once its run finished, and never in two.

Records are copied as they are on the topic: a single-object record written with the schema
embedded in the files is its Avro body after the 10-byte header, byte for byte. A record
written with another (older) version of the schema is decoded and re-encoded with the current
one. Every record is decoded once anyway, for its date and so an undecodable record stops
the export (naming its partition and offset) instead of reaching the files.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import io
import json
import os
import re
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, TopicPartition

from dsh.errors import SessionError, register_error
from dsh.formats.jsonl import fsync_directory, replace_atomically
from schemas import SESSION_EVENT, EventRecord, decode_event, default_store
from schemas.codec import HEADER_SIZE
from schemas.records import default_codec
from servicekit import kafka_clients
from servicekit.partition_reader import PartitionReadError, read_partitions
from servicekit.settings import KafkaSettings
from servicekit.topics import partition_counts

Progress = Callable[[int, int], None]

MANIFEST = "_offsets.json"
LOCK = "_lock"
MANIFEST_FORMAT = 1
CODECS = ("deflate", "null", "snappy")
# A container block is compressed as one unit: big enough to compress well, small enough that
# a reader can split and stream.
BLOCK_BYTES = 256 * 1024
# A new file is started past this size (it keeps files easy to move and split).
FILE_MAX_BYTES = 256 * 1024 * 1024
_PART = re.compile(r"^part-(\d+)-(\d+)-(\d+)\.avro$")
_DAY_MS = 86_400_000


@register_error
class ExportError(SessionError):
    default_code = "EXPORT"


@register_error
class ExportManifestError(ExportError):
    """``MANIFEST_CORRUPT``, ``MANIFEST_TOPIC`` (another topic's export), ``MANIFEST_AHEAD``
    (the topic was recreated or is another cluster) or ``MANIFEST_PENDING_LOST``."""

    default_code = "MANIFEST_CORRUPT"


@register_error
class ExportBusyError(ExportError):
    default_code = "EXPORT_BUSY"


@register_error
class ExportRecordError(ExportError):
    """A record that does not decode as a SessionEvent; nothing of the run was committed."""

    default_code = "RECORD_UNDECODABLE"


@dataclass
class ExportResult:
    directory: str
    topic: str
    records: int = 0
    files: list[str] = field(default_factory=list)  # relative to the directory
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition: [from, to)
    skipped: dict[int, int] = field(default_factory=dict)  # offsets lost to retention
    bytes: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "topic": self.topic,
            "records": self.records,
            "files": self.files,
            "ranges": {str(p): list(r) for p, r in sorted(self.ranges.items())},
            "skipped": {str(p): n for p, n in sorted(self.skipped.items())},
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "recordsPerSecond": round(self.records / self.seconds) if self.seconds else 0,
        }


# -- the checkpoint -----------------------------------------------------------------------


@dataclass
class Manifest:
    topic: str
    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset to export
    renames: list[tuple[str, str]] = field(default_factory=list)  # owed: (temporary, final)
    deletes: list[str] = field(default_factory=list)  # owed: files a full re-export replaced

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "topic": self.topic,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "pending": {"renames": [list(r) for r in self.renames], "deletes": self.deletes},
            "updatedAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }

    @classmethod
    def load(cls, directory: Path) -> Manifest | None:
        path = directory / MANIFEST
        try:
            value = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ExportManifestError(
                f"{path}: unreadable checkpoint ({exc}); export into a new directory",
                code="MANIFEST_CORRUPT",
            ) from None
        try:
            if value["format"] != MANIFEST_FORMAT:
                raise ValueError(f"format {value['format']!r}")
            pending = value.get("pending", {})
            return cls(
                str(value["topic"]),
                {int(p): int(o) for p, o in value["offsets"].items()},
                [(str(a), str(b)) for a, b in pending.get("renames", [])],
                [str(d) for d in pending.get("deletes", [])],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ExportManifestError(
                f"{path}: not a dsh export checkpoint ({exc}); export into a new directory",
                code="MANIFEST_CORRUPT",
            ) from None

    def save(self, directory: Path) -> None:
        text = json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"
        replace_atomically(directory / MANIFEST, [text.encode()])

    def roll_forward(self, directory: Path) -> None:
        """Do the renames and deletes the committed checkpoint owes (idempotent), then record
        that nothing is owed any more."""
        if not self.renames and not self.deletes:
            return
        touched: set[Path] = set()
        finals = set()
        for tmp, final in self.renames:
            src, dst = directory / tmp, directory / final
            finals.add(final)
            if src.exists():
                os.replace(src, dst)
            elif not dst.exists():
                raise ExportManifestError(
                    f"{directory / MANIFEST} owes {final} but neither it nor {tmp} exists; "
                    "re-export with --from-beginning",
                    code="MANIFEST_PENDING_LOST",
                )
            touched.add(dst.parent)
        for rel in self.deletes:
            if rel not in finals:
                (directory / rel).unlink(missing_ok=True)
                touched.add((directory / rel).parent)
        for d in touched:
            fsync_directory(d)
        self.renames, self.deletes = [], []
        self.save(directory)


# -- files --------------------------------------------------------------------------------


@cache
def _date_of_day(day: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


class _PartFile:
    """One container being written under a temporary name; records arrive as Avro bodies."""

    def __init__(self, directory: Path, date: str, partition: int, first: int, codec: str):
        self.dir = directory / f"date={date}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.date, self.partition, self.first, self.last = date, partition, first, first
        self.tmp = self.dir / f".part-{partition}-{first}.avro.tmp"
        self.fh: IO[bytes] = open(self.tmp, "wb")  # noqa: SIM115 - closed by close()/discard()
        from fastavro.write import Writer

        self.writer = Writer(self.fh, default_store().current(SESSION_EVENT).schema, codec=codec)
        self.block = bytearray()
        self.count = 0
        self.block_count = 0

    def add(self, offset: int, body: bytes) -> None:
        self.block += body
        self.block_count += 1
        self.count += 1
        self.last = offset
        if len(self.block) >= BLOCK_BYTES:
            self._write_block()

    def _write_block(self) -> None:
        if self.block_count:
            # fastavro frames, compresses and syncs the block; the bodies are already Avro.
            block = types.SimpleNamespace(
                num_records=self.block_count, bytes_=io.BytesIO(bytes(self.block))
            )
            self.writer.write_block(block)
            self.block = bytearray()
            self.block_count = 0

    def size(self) -> int:
        return self.fh.tell() + len(self.block)

    @property
    def final_name(self) -> str:
        return f"date={self.date}/part-{self.partition}-{self.first}-{self.last}.avro"

    def close(self) -> int:
        self._write_block()
        self.writer.flush()
        self.fh.flush()
        os.fsync(self.fh.fileno())
        size = self.fh.tell()
        self.fh.close()
        return size

    def discard(self) -> None:
        if not self.fh.closed:
            self.fh.close()
        self.tmp.unlink(missing_ok=True)


def _part_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("date=*/part-*.avro") if _PART.match(p.name))


def _remove_temporaries(directory: Path) -> None:
    """Temporary files of a run that crashed before its checkpoint: their records are still
    after the checkpoint and get exported again."""
    for tmp in directory.glob("date=*/.part-*.avro.tmp"):
        tmp.unlink(missing_ok=True)


@cache
def _json_of_datum() -> Callable[[Any], Any]:
    from schemas.convert import compile_codec

    decode: Callable[[Any], Any] = compile_codec(default_store().current(SESSION_EVENT).schema)[1]
    return decode


def read_export(directory: str | Path) -> Iterator[EventRecord]:
    """Every exported event as an ``EventRecord`` (wire JSON), file by file. Reads with fastavro
    and the schema embedded in each file, as an analytics engine would."""
    import fastavro

    to_json = _json_of_datum()
    for path in _part_files(Path(directory)):
        with open(path, "rb") as fh:
            for datum in fastavro.reader(fh, return_record_name=True):
                wire = dict(to_json(datum))
                yield EventRecord(wire.pop("sessionId"), wire, wire.pop("formatVersion"))


# -- Kafka --------------------------------------------------------------------------------


def _read(
    consumer: Consumer, topic: str, ranges: dict[int, tuple[int, int]], timeout_s: float
) -> Iterator[tuple[int, int, bytes]]:
    """(partition, offset, value) of every committed record in ``ranges`` ([start, end) per
    partition), partitions interleaved, each in offset order."""
    try:
        for m in read_partitions(consumer, topic, dict(ranges), timeout_s):
            yield m.partition() or 0, m.offset() or 0, m.value() or b""
    except PartitionReadError as exc:
        raise PartitionReadError(
            f"{exc.message}; nothing of this run was committed, re-run to retry", code=exc.code
        ) from None


# -- the run ------------------------------------------------------------------------------


def _check_codec(codec: str) -> None:
    """Fail before reading anything when fastavro cannot write ``codec`` here."""
    if codec not in CODECS:
        raise ExportError(f"codec {codec!r}: choose one of {', '.join(CODECS)}", code="CODEC")
    import fastavro

    try:
        # A codec's library is only looked up when a block is compressed: write one.
        probe = {"type": "record", "name": "probe", "fields": []}
        fastavro.writer(io.BytesIO(), probe, [{}], codec=codec)
    except ValueError as exc:  # snappy without cramjam installed
        raise ExportError(
            f"codec {codec} is not available: {exc}; use --codec deflate",
            code="CODEC_UNAVAILABLE",
        ) from None


def export(
    directory: str | Path,
    *,
    kafka: KafkaSettings | None = None,
    from_beginning: bool = False,
    codec: str = "deflate",
    connect_timeout: float = 10.0,
    timeout: float = 60.0,
    progress: Progress | None = None,
) -> ExportResult:
    """Export what the events topic holds beyond ``directory``'s checkpoint (everything with
    ``from_beginning``, which replaces the directory's files). ``connect_timeout`` bounds the
    first contact with the broker, ``timeout`` a read that makes no progress."""
    _check_codec(codec)
    started = time.perf_counter()
    kafka = kafka or KafkaSettings()
    topic = kafka.topic("events")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK, "a+b") as lock:
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
            manifest.roll_forward(root)
        _remove_temporaries(root)
        result = ExportResult(str(root), topic)
        count = partition_counts(kafka, [topic], connect_timeout, quiet=True)[topic]
        consumer = kafka_clients.reader(kafka, topics=(topic,))
        try:
            _run(
                root,
                consumer,
                topic,
                count,
                manifest,
                from_beginning,
                codec,
                timeout,
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
    codec: str,
    timeout: float,
    result: ExportResult,
    progress: Progress | None,
) -> None:
    committed = {} if manifest is None or from_beginning else dict(manifest.offsets)
    stale = [p for p in committed if p >= count]
    ranges: dict[int, tuple[int, int]] = {}
    for p in range(count):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10.0, False)
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
    open_files: dict[int, _PartFile] = {}
    done: list[_PartFile] = []
    codec_ = default_codec()
    current = default_store().current(SESSION_EVENT).header
    committed_run = False
    try:
        for p, offset, value in _read(consumer, topic, ranges, timeout):
            try:
                record = decode_event(value, codec=codec_)
                body = (
                    value[HEADER_SIZE:]
                    if value[:HEADER_SIZE] == current
                    else codec_.encode(
                        SESSION_EVENT,
                        {
                            **record.event,
                            "sessionId": record.session_id,
                            "formatVersion": record.format_version,
                        },
                    )[HEADER_SIZE:]
                )
            except SessionError as exc:
                raise ExportRecordError(
                    f"{topic}[{p}] offset {offset}: {type(exc).__name__} [{exc.code}]: "
                    f"{exc.message}; nothing of this run was committed (a newer schema needs a "
                    "newer dsh; a corrupt record needs an operator)",
                    code="RECORD_UNDECODABLE",
                ) from exc
            date = _date_of_day(int(record.event["time"]) // _DAY_MS)
            part = open_files.get(p)
            if part is not None and (part.date != date or part.size() >= FILE_MAX_BYTES):
                # One open file per partition: a partition's records are (nearly) in time
                # order, so a date change closes the day's file rather than holding many open.
                result.bytes += part.close()
                done.append(part)
                part = None
            if part is None:
                part = open_files[p] = _PartFile(root, date, p, offset, codec)
            part.add(offset, body)
            result.records += 1
            if progress is not None and result.records % 10_000 == 0:
                progress(result.records, total)
        for part in open_files.values():
            result.bytes += part.close()
            done.append(part)
        open_files.clear()
        for d in {part.dir for part in done}:
            fsync_directory(d)  # the temporaries are durable before the checkpoint names them
        new = Manifest(
            topic,
            {p: end for p, (_, end) in ranges.items()},
            [(str(part.tmp.relative_to(root)), part.final_name) for part in done],
            [str(f.relative_to(root)) for f in _part_files(root)] if from_beginning else [],
        )
        if manifest is None or new.offsets != manifest.offsets or new.renames or new.deletes:
            new.save(root)  # the commit point
            committed_run = True
            new.roll_forward(root)
    except BaseException:
        if not committed_run:  # after the commit the temporaries are owed: the next run renames
            for part in [*open_files.values(), *done]:
                part.discard()
        raise
    if progress is not None:
        progress(result.records, total)
    result.files = sorted(part.final_name for part in done)
    result.ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
