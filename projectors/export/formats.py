"""The formats ``dsh export DIR`` writes, each a file extension, the codecs it takes and the
:class:`~projectors.export.files.Sink` that writes it."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import IO

from projectors.export.errors import ExportError, ExportFormatError
from projectors.export.files import Sink


@dataclass(frozen=True)
class ExportFormat:
    name: str
    ext: str
    codecs: tuple[str, ...]  # the first is the default
    doc: str

    def sink(self, fh: IO[bytes], codec: str) -> Sink:
        if self.name == "parquet":
            from projectors.export.analytics import ParquetSink

            return ParquetSink(fh, codec)
        from projectors.export.avro_files import FlatAvroSink, WireAvroSink

        return WireAvroSink(fh, codec) if self.name == "avro" else FlatAvroSink(fh, codec)


AVRO_CODECS = ("deflate", "null", "snappy")
FORMATS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat("avro", "avro", AVRO_CODECS, "the wire SessionEvent schema, records as-is"),
        ExportFormat("avro-flat", "avro", AVRO_CODECS, "one flat row per event, no recursive type"),
        ExportFormat("parquet", "parquet", ("zstd", "snappy", "null"), "the same rows as Parquet"),
    )
}


def resolve(name: str, codec: str | None) -> tuple[ExportFormat, str]:
    """The format and codec to write, checked before anything is read: a codec the format does
    not take, or whose library is missing here, fails now rather than at the first file."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ExportFormatError(
            f"format {name!r}: choose one of {', '.join(FORMATS)}", code="EXPORT_FORMAT"
        )
    codec = codec or fmt.codecs[0]
    if codec not in fmt.codecs:
        raise ExportFormatError(
            f"codec {codec!r} with --format {name}: choose one of {', '.join(fmt.codecs)}",
            code="CODEC",
        )
    if fmt.name == "parquet":
        from projectors.export.analytics import require_pyarrow

        require_pyarrow()
    else:
        _check_avro_codec(codec)
    return fmt, codec


def _check_avro_codec(codec: str) -> None:
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
