"""Avro single-object encoding (marker C3 01, 8-byte little-endian CRC-64-AVRO fingerprint of
the writer schema, body) over the schema store.

A reader decodes any writer schema its store knows, resolved against the newest version of the
same record (Avro reader/writer resolution); an unknown fingerprint is an error, never a guess.
Values are written by the compiled writers (:mod:`schemas.writers`); bytes written with the
reader's own schema (the common case) are read by the compiled readers (:mod:`schemas.readers`,
native when built); other writer versions are resolved by fastavro and mapped to wire JSON by
:mod:`schemas.convert`. Everything is prepared once per schema and cached.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader

from schemas.convert import compile_codec
from schemas.errors import (
    BadMarkerError,
    CodecError,
    CorruptRecordError,
    SchemaMismatchError,
    TooDeep,
)
from schemas.readers import compile_reader
from schemas.store import SINGLE_OBJECT_MARKER, MessageSchema, SchemaStore, default_store
from schemas.writers import compile_writer

HEADER_SIZE = 10


@dataclass(frozen=True, eq=False)
class _Writer:
    schema: MessageSchema
    encode: Callable[[Any], bytes]  # wire JSON → header + body


@dataclass(frozen=True, eq=False)
class _Reader:
    writer: MessageSchema
    read: Callable[[bytes, int], tuple[Any, int]]  # (record, body offset) → (wire JSON, end)


class Codec:
    """Wire JSON ⇄ single-object bytes for the message schemas of one store."""

    def __init__(self, store: SchemaStore | None = None) -> None:
        self.store = store if store is not None else default_store()
        self._writers: dict[str, _Writer] = {}
        self._readers: dict[bytes, _Reader] = {}
        self._frozen: dict[bytes, _Reader | None] = {}  # None: no frozen reader for it
        # Marker + fingerprint (the whole 10-byte header) → reader: a known header is one
        # lookup, with the marker and length checks done once when it was first seen.
        self._heads: dict[bytes, _Reader] = {}
        self._frozen_heads: dict[bytes, _Reader] = {}

    def _writer(self, name: str) -> _Writer:
        w = self._writers.get(name)
        if w is None:
            schema = self.store.current(name)
            w = _Writer(schema, compile_writer(schema.schema, schema.header))
            self._writers[name] = w
        return w

    def _reader(self, fingerprint: bytes) -> _Reader:
        r = self._readers.get(fingerprint)
        if r is None:
            writer = self.store.by_fingerprint(fingerprint)
            reader = self.store.current(writer.name)
            if reader is writer:
                r = _Reader(writer, compile_reader(writer.schema))
            else:
                r = _Reader(writer, _resolving_read(writer, reader))
            self._readers[fingerprint] = r
        return r

    def _frozen_reader(self, fingerprint: bytes) -> _Reader | None:
        if fingerprint not in self._frozen:
            r = self._reader(fingerprint)
            same = self.store.current(r.writer.name) is r.writer
            # Other writer versions go through fastavro's resolution: plain values only.
            self._frozen[fingerprint] = (
                _Reader(r.writer, compile_reader(r.writer.schema, frozen=True)) if same else None
            )
        return self._frozen[fingerprint]

    def _header_reader(self, data: bytes, frozen: bool) -> _Reader:
        """Check a header not seen before and remember its reader."""
        if data[:2] != SINGLE_OBJECT_MARKER:
            raise BadMarkerError(
                "not an Avro single-object record: starts with "
                f"{data[:2].hex() or 'nothing'}, expected c301"
            )
        if len(data) < HEADER_SIZE:
            raise CorruptRecordError(f"truncated single-object header: {len(data)} bytes")
        fingerprint = data[2:HEADER_SIZE]
        r = self._reader(fingerprint)  # UnknownFingerprintError if the store lacks it
        if frozen:
            r = self._frozen_reader(fingerprint) or r
            self._frozen_heads[data[:HEADER_SIZE]] = r
        else:
            self._heads[data[:HEADER_SIZE]] = r
        return r

    def writer_of(self, data: bytes) -> MessageSchema:
        """The schema ``data`` was written with, from its single-object header."""
        r = self._heads.get(data[:HEADER_SIZE])
        return (r if r is not None else self._header_reader(data, False)).writer

    def encode(self, name: str, value: Mapping[str, Any]) -> bytes:
        """Encode the wire JSON of a ``name`` record with the newest schema for ``name``."""
        w = self._writers.get(name) or self._writer(name)
        return w.encode(value)

    def decode_frozen(self, data: bytes, expect: str | None = None) -> tuple[str, dict[str, Any]]:
        """:meth:`decode`, but every object and array below the top record is already the
        core's FrozenDict / FrozenList, so ``dsh.Event.from_json`` shares them instead of
        copying (its checks still run; already-frozen values pass them as they are). The
        values are exactly what ``dsh.json_snapshot.freeze`` makes of a plain decode: Avro
        carries only lossless JSON (string keys, finite doubles). A JsonValue nested deeper
        than ``avro_read.FROZEN_JSON_DEPTH``, or a writer schema other than the current one, is
        decoded plainly instead, leaving the core's depth limit to judge it (the plain read
        refuses, as corrupt, only a JsonValue nested deeper than that limit)."""
        try:
            return self.decode(data, expect, True)
        except TooDeep:
            return self.decode(data, expect)

    def decode(
        self, data: bytes, expect: str | None = None, frozen: bool = False
    ) -> tuple[str, dict[str, Any]]:
        """Decode single-object bytes to ``(record name, wire JSON)``.

        ``expect`` names the record kind the caller can handle; any other is a
        SchemaMismatchError rather than a surprise downstream. ``frozen``: see
        :meth:`decode_frozen`, which callers should use (it handles TooDeep).
        """
        if type(data) is not bytes:
            data = bytes(data)
        r = (self._frozen_heads if frozen else self._heads).get(data[:HEADER_SIZE])
        if r is None:
            r = self._header_reader(data, frozen)
        name = r.writer.name
        if expect is not None and name != expect:
            raise SchemaMismatchError(f"expected a {expect} record, got {name}")
        try:
            value, end = r.read(data, HEADER_SIZE)
        except (CodecError, TooDeep):
            raise
        except (IndexError, struct.error, EOFError):
            raise CorruptRecordError(f"{name}: truncated record ({len(data)} bytes)") from None
        except RecursionError:
            raise CorruptRecordError(f"{name}: value nested too deeply") from None
        except Exception as e:
            # Any other failure to read foreign bytes (bad UTF-8, bad lengths, …) is
            # corruption of those bytes, whatever the internal exception.
            if type(e).__name__ == "SchemaResolutionError":
                raise SchemaMismatchError(
                    f"{name}: writer schema {r.writer.fingerprint_hex} does not resolve"
                    f" against the reader schema: {e}"
                ) from None
            raise CorruptRecordError(f"{name}: undecodable body: {type(e).__name__}: {e}") from None
        if end != len(data):
            if end > len(data):  # a length field pointed past the end
                raise CorruptRecordError(f"{name}: truncated record ({len(data)} bytes)")
            raise CorruptRecordError(f"{name}: {len(data) - end} trailing bytes after the record")
        return name, value


def _resolving_read(
    writer: MessageSchema, reader: MessageSchema
) -> Callable[[bytes, int], tuple[Any, int]]:
    to_json = compile_codec(reader.schema)[1]
    # fastavro's compiled reader recurses in C with no limit: a deeply nested value would
    # overflow the stack (a crash, not an error). So the bytes are first read with the writer's
    # own schema by the compiled readers, which refuse nesting the core would refuse.
    vet = compile_reader(writer.schema)

    def read_record(data: bytes, pos: int) -> tuple[Any, int]:
        vet(data, pos)
        buf = BytesIO(data)
        buf.seek(pos)
        datum = schemaless_reader(buf, writer.parsed, reader.parsed, return_record_name=True)
        return to_json(datum), buf.tell()

    return read_record
