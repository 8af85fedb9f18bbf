"""Avro single-object encoding (marker C3 01, 8-byte little-endian CRC-64-AVRO fingerprint of
the writer schema, body) over the schema store.

A reader decodes any writer schema its store knows, resolved against the newest version of the
same record (Avro reader/writer resolution); an unknown fingerprint is an error, never a guess.
Everything that can be prepared once is prepared once per (writer, reader) pair and cached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from schemas.convert import Decoder, Encoder, compile_codec
from schemas.errors import (
    BadMarkerError,
    CorruptRecordError,
    SchemaMismatchError,
    UnencodableError,
)
from schemas.store import SINGLE_OBJECT_MARKER, MessageSchema, SchemaStore, default_store

HEADER_SIZE = 10


@dataclass(frozen=True, eq=False)
class _Writer:
    schema: MessageSchema
    encode: Encoder


@dataclass(frozen=True, eq=False)
class _Reader:
    writer: MessageSchema
    reader_parsed: Any  # None when writer and reader schema are the same (no resolution)
    decode: Decoder


class Codec:
    """Wire JSON ⇄ single-object bytes for the message schemas of one store."""

    def __init__(self, store: SchemaStore | None = None) -> None:
        self.store = store if store is not None else default_store()
        self._writers: dict[str, _Writer] = {}
        self._readers: dict[bytes, _Reader] = {}

    def _writer(self, name: str) -> _Writer:
        w = self._writers.get(name)
        if w is None:
            schema = self.store.current(name)
            w = _Writer(schema, compile_codec(schema.schema)[0])
            self._writers[name] = w
        return w

    def _reader(self, fingerprint: bytes) -> _Reader:
        r = self._readers.get(fingerprint)
        if r is None:
            writer = self.store.by_fingerprint(fingerprint)
            reader = self.store.current(writer.name)
            r = _Reader(
                writer,
                None if reader is writer else reader.parsed,
                compile_codec(reader.schema)[1],
            )
            self._readers[fingerprint] = r
        return r

    def encode(self, name: str, value: Mapping[str, Any]) -> bytes:
        """Encode the wire JSON of a ``name`` record with the newest schema for ``name``."""
        w = self._writer(name)
        datum = w.encode(value)
        buf = BytesIO()
        buf.write(w.schema.header)
        try:
            schemaless_writer(buf, w.schema.parsed, datum)
        except UnicodeEncodeError as e:
            raise UnencodableError(
                f"{name}: string is not valid Unicode (lone surrogate?): {e.reason}"
            ) from None
        except (ValueError, TypeError, OverflowError) as e:
            raise UnencodableError(f"{name}: {e}") from None
        return buf.getvalue()

    def decode(self, data: bytes, expect: str | None = None) -> tuple[str, dict[str, Any]]:
        """Decode single-object bytes to ``(record name, wire JSON)``.

        ``expect`` names the record kind the caller can handle; any other is a
        SchemaMismatchError rather than a surprise downstream.
        """
        if data[:2] != SINGLE_OBJECT_MARKER:
            raise BadMarkerError(
                "not an Avro single-object record: starts with "
                f"{bytes(data[:2]).hex() or 'nothing'}, expected c301"
            )
        if len(data) < HEADER_SIZE:
            raise CorruptRecordError(f"truncated single-object header: {len(data)} bytes")
        r = self._reader(bytes(data[2:HEADER_SIZE]))
        name = r.writer.name
        if expect is not None and name != expect:
            raise SchemaMismatchError(f"expected a {expect} record, got {name}")
        buf = BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            datum = schemaless_reader(
                buf, r.writer.parsed, r.reader_parsed, return_record_name=True
            )
        except EOFError:
            raise CorruptRecordError(f"{name}: truncated record ({len(data)} bytes)") from None
        except Exception as e:
            # Any failure to read foreign bytes is corruption of those bytes, whatever
            # fastavro's internal exception is; resolution failures say so.
            if type(e).__name__ == "SchemaResolutionError":
                raise SchemaMismatchError(
                    f"{name}: writer schema {r.writer.fingerprint_hex} does not resolve"
                    f" against the reader schema: {e}"
                ) from None
            raise CorruptRecordError(f"{name}: undecodable body: {type(e).__name__}: {e}") from None
        if buf.tell() != len(data):
            raise CorruptRecordError(
                f"{name}: {len(data) - buf.tell()} trailing bytes after the record"
            )
        try:
            return name, r.decode(datum)
        except (KeyError, ValueError, TypeError, IndexError) as e:
            raise CorruptRecordError(f"{name}: undecodable body: {type(e).__name__}: {e}") from None
