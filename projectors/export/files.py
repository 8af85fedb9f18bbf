"""The export's container files: their names (``date=YYYY-MM-DD/part-<partition>-<first>-<last>
.avro``, hidden ``.part-….avro.tmp`` while written) and one file being written.

Records arrive as Avro bodies (the SessionEvent schema embedded in the file) and are framed
into blocks without being decoded again."""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import types
from functools import cache
from pathlib import Path
from typing import IO

from schemas import SESSION_EVENT, default_store

# A container block is compressed as one unit: big enough to compress well, small enough that
# a reader can split and stream.
BLOCK_BYTES = 256 * 1024
_PART = re.compile(r"^part-(\d+)-(\d+)-(\d+)\.avro$")


@cache
def date_of_day(day: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


class PartFile:
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


def part_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("date=*/part-*.avro") if _PART.match(p.name))


def remove_temporaries(directory: Path) -> None:
    """Temporary files of a run that crashed before its checkpoint: their records are still
    after the checkpoint and get exported again."""
    for tmp in directory.glob("date=*/.part-*.avro.tmp"):
        tmp.unlink(missing_ok=True)
