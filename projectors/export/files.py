"""The export's files: their names (``date=YYYY-MM-DD/part-<partition>-<first>-<last>.<ext>``,
hidden ``.part-….<ext>.tmp`` while written) and one file being written.

A :class:`PartFile` owns the file (its names, the fsync, the discard); what goes into it is its
:class:`Sink`'s job, one per format (wire Avro bodies, flat Avro rows, Parquet row groups)."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import IO, NamedTuple, Protocol

from schemas import EventRecord


@cache
def date_of_day(day: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


class Exported(NamedTuple):
    """One record of the events topic on its way into a file."""

    partition: int
    offset: int
    value: bytes  # as on the topic
    record: EventRecord  # decoded
    inherited: bool  # the record carries ``dsh-inherited: 1``


class Sink(Protocol):
    """Writes one format into an open file."""

    def add(self, item: Exported) -> None: ...

    def buffered(self) -> int:
        """Bytes held in memory, not yet in the file."""
        ...

    def flush(self) -> None:
        """Write what is held now (a row group, a block), to free the memory it takes."""
        ...

    def finish(self) -> None:
        """Write what is held and the format's trailer; the file is flushed and fsynced after."""
        ...


SinkFactory = Callable[[IO[bytes], str], Sink]  # (file, codec) -> sink


class PartFile:
    """One file being written under a temporary name."""

    def __init__(
        self,
        directory: Path,
        date: str,
        partition: int,
        first: int,
        ext: str,
        sink: SinkFactory,
        codec: str,
    ):
        self.dir = directory / f"date={date}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.date, self.partition, self.first, self.last = date, partition, first, first
        self.ext = ext
        self.tmp = self.dir / f".part-{partition}-{first}.{ext}.tmp"
        self.fh: IO[bytes] = open(self.tmp, "wb")  # noqa: SIM115 - closed by close()/discard()
        self.sink = sink(self.fh, codec)

    def add(self, item: Exported) -> None:
        self.sink.add(item)
        self.last = item.offset

    def size(self) -> int:
        return self.fh.tell() + self.sink.buffered()

    @property
    def final_name(self) -> str:
        return f"date={self.date}/part-{self.partition}-{self.first}-{self.last}.{self.ext}"

    def close(self) -> int:
        self.sink.finish()
        self.fh.flush()
        os.fsync(self.fh.fileno())
        size = self.fh.tell()
        self.fh.close()
        return size

    def discard(self) -> None:
        if not self.fh.closed:
            self.fh.close()
        self.tmp.unlink(missing_ok=True)


def part_files(directory: Path, ext: str = "avro") -> list[Path]:
    pattern = re.compile(rf"^part-(\d+)-(\d+)-(\d+)\.{re.escape(ext)}$")
    return sorted(p for p in directory.glob(f"date=*/part-*.{ext}") if pattern.match(p.name))


def remove_temporaries(directory: Path) -> None:
    """Temporary files of a run that crashed before its checkpoint: their records are still
    after the checkpoint and get exported again."""
    for tmp in directory.glob("date=*/.part-*.tmp"):
        tmp.unlink(missing_ok=True)
