"""The two Avro formats: ``avro``, the wire ``SessionEvent`` schema with records copied as
they are on the topic, and ``avro-flat``, one flat row per event (:mod:`.rows`) with no
recursive type, which DuckDB, Polars and Spark read."""

from __future__ import annotations

import io
import types
from functools import cache
from typing import IO, Any, cast

from projectors.export.files import Exported
from projectors.export.rows import COLUMNS, NAMES, Column, row_of
from schemas import SESSION_EVENT, default_store
from schemas.codec import HEADER_SIZE
from schemas.records import default_codec

# A container block is compressed as one unit: big enough to compress well, small enough that
# a reader can split and stream.
BLOCK_BYTES = 256 * 1024
FLAT_SCHEMA_NAME = "dsh.v1.SessionEventRow"


def _avro_type(column: Column) -> Any:
    base: Any = {
        "string": "string",
        "int": "int",
        "long": "long",
        "bool": "boolean",
        "timestamp": {"type": "long", "logicalType": "timestamp-millis"},
        "longs": {"type": "array", "items": "long"},
    }[column.kind]
    return ["null", base] if column.nullable else base


def flat_schema() -> dict[str, Any]:
    """The ``avro-flat`` schema: primitives, nullable primitives and arrays of long only."""
    return {
        "type": "record",
        "name": FLAT_SCHEMA_NAME,
        "doc": "One event of dsh.session.events as a flat row (docs/operations.md#export).",
        "fields": [
            {
                "name": c.name,
                "type": _avro_type(c),
                "doc": c.doc,
                **({"default": None} if c.nullable else {}),
            }
            for c in COLUMNS
        ],
    }


@cache
def _parsed_flat_schema() -> Any:
    import fastavro

    return fastavro.parse_schema(flat_schema())


class WireAvroSink:
    """Records arrive as single-object values and are framed into blocks without being
    encoded again: a value written with the schema embedded in the file is its Avro body after
    the 10-byte header, byte for byte. A value written with another (older) version of the
    schema is re-encoded with the current one."""

    def __init__(self, fh: IO[bytes], codec: str) -> None:
        from fastavro.write import Writer

        store = default_store().current(SESSION_EVENT)
        self.header = store.header
        self.writer = Writer(fh, store.schema, codec=codec)
        self.block = bytearray()
        self.count = 0

    def add(self, item: Exported) -> None:
        value, record = item.value, item.record
        if value[:HEADER_SIZE] == self.header:
            self.block += value[HEADER_SIZE:]
        else:
            wire = {
                **record.event,
                "sessionId": record.session_id,
                "formatVersion": record.format_version,
            }
            self.block += default_codec().encode(SESSION_EVENT, wire)[HEADER_SIZE:]
        self.count += 1
        if len(self.block) >= BLOCK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.count:
            # fastavro frames, compresses and syncs the block; the bodies are already Avro.
            block = types.SimpleNamespace(
                num_records=self.count, bytes_=io.BytesIO(bytes(self.block))
            )
            self.writer.write_block(block)
            self.block = bytearray()
            self.count = 0

    def buffered(self) -> int:
        return len(self.block)

    def finish(self) -> None:
        self.flush()
        self.writer.flush()


class FlatAvroSink:
    """Rows encoded by fastavro against :func:`flat_schema`, a block per ~BLOCK_BYTES."""

    def __init__(self, fh: IO[bytes], codec: str) -> None:
        from fastavro.write import Writer

        self.writer = Writer(fh, _parsed_flat_schema(), codec=codec, sync_interval=BLOCK_BYTES)

    def add(self, item: Exported) -> None:
        row = row_of(item.record, item.partition, item.offset, item.inherited)
        self.writer.write(dict(zip(NAMES, row, strict=True)))

    def buffered(self) -> int:
        return int(cast(Any, self.writer).io.tell())  # the block being built

    def flush(self) -> None:
        self.writer.flush()  # the block, if any; fastavro writes none for no records

    def finish(self) -> None:
        self.flush()
