"""``--format parquet``: the flat rows of :mod:`.rows` as Parquet, written with pyarrow (the
optional ``analytics`` extra), a row group at a time so memory stays bounded."""

from __future__ import annotations

from functools import cache
from typing import IO, Any

from projectors.export.errors import ExportDependencyError
from projectors.export.files import Exported
from projectors.export.rows import COLUMNS, Column, row_of

# A row group is written once this many rows, or this many bytes of rows, are held (fewer when
# the export's budget across all partitions is reached: projectors/export/budget.py).
GROUP_ROWS = 64 * 1024
GROUP_BYTES = 32 * 1024 * 1024
# What a held row takes beside its data JSON: the Python objects of its other columns and the
# list slots (tracemalloc of the demo's events: ~520 bytes a row; 100 had counted a third of it).
ROW_OVERHEAD = 512
# Columns of few distinct values: dictionary-encoded (the others, data above all, would only
# fill a dictionary page to fall back from it).
_DICTIONARY = [
    "session_id",
    "type",
    "surface_op",
    "role",
    "provider",
    "model",
    "tool_name",
    "error_code",
    "end_reason",
]
_DATA = [c.name for c in COLUMNS].index("data")


def require_pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise ExportDependencyError(
            "--format parquet needs pyarrow: pip install 'dsh-pipeline[analytics]'",
            code="ANALYTICS_EXTRA_MISSING",
        ) from None
    return pyarrow


def _arrow_type(column: Column) -> Any:
    pa = require_pyarrow()
    return {
        "string": pa.string(),
        "int": pa.int32(),
        "long": pa.int64(),
        "bool": pa.bool_(),
        "timestamp": pa.timestamp("ms", tz="UTC"),
        "longs": pa.list_(pa.int64()),
    }[column.kind]


@cache
def arrow_schema() -> Any:
    pa = require_pyarrow()
    return pa.schema(
        [
            pa.field(c.name, _arrow_type(c), nullable=c.nullable, metadata={"doc": c.doc})
            for c in COLUMNS
        ]
    )


class ParquetSink:
    def __init__(self, fh: IO[bytes], codec: str) -> None:
        import pyarrow.parquet as pq

        self.writer = pq.ParquetWriter(
            fh,
            arrow_schema(),
            compression="none" if codec == "null" else codec,
            use_dictionary=_DICTIONARY,
        )
        self.columns: list[list[Any]] = [[] for _ in COLUMNS]
        self.rows = 0
        self.bytes = 0

    def add(self, item: Exported) -> None:
        row = row_of(item.record, item.partition, item.offset, item.inherited)
        for column, value in zip(self.columns, row, strict=True):
            column.append(value)
        self.rows += 1
        self.bytes += len(row[_DATA]) + ROW_OVERHEAD
        if self.rows >= GROUP_ROWS or self.bytes >= GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            pa = require_pyarrow()
            schema = arrow_schema()
            arrays = [
                pa.array(values, type=field.type)
                for values, field in zip(self.columns, schema, strict=True)
            ]
            self.writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
            self.columns = [[] for _ in COLUMNS]
            self.rows = self.bytes = 0

    def buffered(self) -> int:
        return self.bytes

    def finish(self) -> None:
        self.flush()
        self.writer.close()  # the footer; the file object stays open (pyarrow did not open it)
