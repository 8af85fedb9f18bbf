"""The compiled readers: Avro bytes written with a schema → its wire JSON, compiled once per
schema. Records are generated functions (:mod:`schemas.reader_source`), everything else
closures over the primitives of :mod:`schemas.avro_io`.

One reader per job of the codec, both from the same generator: the *plain* reader builds dicts
and lists; the *frozen* one builds the core's FrozenDict / FrozenList below its root record, as
``dsh.json_snapshot.freeze`` would (``Codec.decode_frozen``, the writer's command frames). Bytes
of another writer version of a record are not read here: the codec resolves them with fastavro
(:mod:`schemas.convert`).
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from dsh.json_snapshot import MAX_DEPTH, FrozenDict, FrozenList
from schemas import native
from schemas.avro_io import Reader, bad_index, read_null
from schemas.errors import CorruptRecordError
from schemas.reader_source import Flat, RecordReaderSource
from schemas.rules import JSON_VALUE, Names, tag


class _ReaderCompiler:
    def __init__(self, schema: dict[str, Any], frozen: bool) -> None:
        self.names = Names(schema, compiled=True)
        self.resolve = self.names.resolve
        # Frozen: readers of every record but the root build frozen containers.
        self.root = schema["name"]
        self.frozen = frozen
        self.readers: dict[str, Reader] = {}
        # Native when built and on (schemas.native): every reader below binds these.
        self.read = native.read_primitives()

    def reader(self, node: Any) -> Reader:
        node = self.resolve(node)
        if isinstance(node, list):
            return self._union_reader(node)
        if isinstance(node, str):
            by_type: dict[str, Reader] = self.read.BY_TYPE
            return by_type[node]
        kind = node["type"]
        if kind == "record":
            name = node["name"]
            if name == JSON_VALUE:
                json_value: Reader = (
                    self.read.read_json_value_frozen if self.frozen else self.read.read_json_value
                )
                return json_value
            if name not in self.readers:
                # What the record's own fields call to read it again (a tool-result block in
                # a tool-result block): counted, see _recursive.
                self.readers[name] = _recursive(name, self.readers)
                self.readers[name] = self._record_reader(node)
            return self.readers[name]
        if kind == "enum":
            return _enum_reader(tuple(node["symbols"]))
        if kind == "array":
            return _array_reader(self.reader(node["items"]), self.frozen, self.read)
        if kind == "map":
            return _map_reader(self.reader(node["values"]), self.frozen, self.read)
        raise ValueError(f"unsupported schema {node!r}")

    def union_table(self, branches: list[Any]) -> tuple[Reader | None, ...]:
        """Union readers indexed by the raw index byte (zigzag 2i): one lookup, no varint."""
        if len(branches) > 63:
            raise ValueError("unions of more than 63 branches are not supported")
        table: list[Reader | None] = [None] * 128
        for i, b in enumerate(branches):
            table[2 * i] = read_null if self.resolve(b) == "null" else self.reader(b)
        return tuple(table)

    def _union_reader(self, branches: list[Any]) -> Reader:
        table = self.union_table(branches)

        def r_union(data: bytes, pos: int) -> tuple[Any, int]:
            b = data[pos]
            r = table[b] if b < 128 else None
            if r is None:
                raise bad_index(pos)
            return r(data, pos + 1)

        return r_union

    def _flat_branches(self, branches: list[Any]) -> Flat:
        """Index byte → fields (name, kind, expected tag value or None) of the branches that
        are flat records of required strings and longs (read inline by the generated code)."""
        flat: dict[int, list[tuple[str, str, str | None]]] = {}
        for i, b in enumerate(branches):
            node = self.resolve(b)
            if not (isinstance(node, dict) and node["type"] == "record"):
                continue
            if node["name"] == JSON_VALUE:
                continue
            when = tag(node) or {}
            kinds = [(f["name"], self.resolve(f["type"])) for f in node["fields"]]
            if all(k in ("string", "long") for _, k in kinds):
                flat[2 * i] = [(f, k, when.get(f)) for f, k in kinds]
        return flat

    def _enum_branches(self, branches: list[Any]) -> dict[int, tuple[str, ...]]:
        """Index byte → symbols of the enum branches (read inline by the generated code)."""
        out: dict[int, tuple[str, ...]] = {}
        for i, b in enumerate(branches):
            node = self.resolve(b)
            if isinstance(node, dict) and node["type"] == "enum":
                out[2 * i] = tuple(node["symbols"])
        return out

    def _record_reader(self, node: dict[str, Any]) -> Reader:
        src = RecordReaderSource(node["name"], self.frozen, node["name"] == self.root, self.read)
        for f in node["fields"]:
            fname, ftype = f["name"], f["type"]
            rt = self.resolve(ftype)
            if isinstance(rt, str) and rt in ("string", "long", "int"):
                src.primitive(fname, rt)
            elif isinstance(rt, list) and len(rt) == 2 and self.resolve(rt[0]) == "null":
                inner = self.resolve(rt[1])
                if isinstance(inner, str) and inner in ("string", "long"):
                    src.optional_primitive(fname, inner)
                else:
                    src.optional(fname, self.reader(rt[1]))
            elif isinstance(rt, list):
                src.union(
                    fname,
                    self.union_table(rt),
                    "null" in map(self.resolve, rt),
                    self._flat_branches(rt),
                    self._enum_branches(rt),
                )
            elif isinstance(rt, dict) and rt["type"] == "array":
                items = self.resolve(rt["items"])
                table: tuple[Reader | None, ...] | None = None
                flat: Flat = {}
                if isinstance(items, list) and "null" not in map(self.resolve, items):
                    table, flat = self.union_table(items), self._flat_branches(items)
                src.array(fname, self.reader(rt), table, self.reader(items), flat)
            else:
                src.field(fname, self.reader(ftype))
        return src.build()


def _recursive(name: str, readers: dict[str, Reader]) -> Reader:
    """The reader of a record inside a record of its own kind: nested at most ``MAX_DEPTH``
    deep (each record is a JSON object, so the core refuses deeper values anyway), and refused
    as corrupt beyond that, in the same place with the Python and the native readers, before
    the native ones can exhaust the stack. Per thread: decodes may run in several."""
    state = threading.local()

    def r_recursive(data: bytes, pos: int) -> tuple[Any, int]:
        depth: int = getattr(state, "depth", 0)
        if depth >= MAX_DEPTH:
            raise CorruptRecordError(
                f"{name} records nested deeper than {MAX_DEPTH} levels at offset {pos}"
            )
        state.depth = depth + 1
        try:
            return readers[name](data, pos)
        finally:
            state.depth = depth

    return r_recursive


def _enum_reader(symbols: tuple[str, ...]) -> Reader:
    by_byte = tuple(symbols[b >> 1] if b < 2 * len(symbols) else None for b in range(0, 128, 2))

    def r_enum(data: bytes, pos: int) -> tuple[Any, int]:
        b = data[pos]
        symbol = by_byte[b >> 1] if b < 0x80 and not b & 1 else None
        if symbol is None:
            raise CorruptRecordError(f"enum index out of range at offset {pos}")
        return symbol, pos + 1

    return r_enum


def _array_reader(items: Reader, frozen: bool, primitives: ModuleType) -> Reader:
    read_block_count = primitives.read_block_count

    def r_array(data: bytes, pos: int) -> tuple[Any, int]:
        out: list[Any] = []
        n, pos = read_block_count(data, pos)
        while n:
            for _ in range(n):
                x, pos = items(data, pos)
                out.append(x)
            n, pos = read_block_count(data, pos)
        return (FrozenList(out) if frozen else out), pos

    return r_array


def _map_reader(values: Reader, frozen: bool, primitives: ModuleType) -> Reader:
    read_block_count, read_str = primitives.read_block_count, primitives.read_str

    def r_map(data: bytes, pos: int) -> tuple[Any, int]:
        out: dict[str, Any] = {}
        n, pos = read_block_count(data, pos)
        while n:
            for _ in range(n):
                k, pos = read_str(data, pos)
                out[k], pos = values(data, pos)
            n, pos = read_block_count(data, pos)
        return (FrozenDict(out) if frozen else out), pos

    return r_map


def compile_reader(schema: dict[str, Any], *, frozen: bool = False) -> Reader:
    """``read(data, pos) -> (wire JSON, end)`` for bytes written with ``schema``.

    ``frozen``: every object and array below the top record is the core's FrozenDict /
    FrozenList (the top record stays a plain dict: callers take envelope fields out of it); may
    raise :class:`~schemas.errors.TooDeep`, see ``Codec.decode_frozen``.
    """
    return _ReaderCompiler(schema, frozen).reader(schema)
