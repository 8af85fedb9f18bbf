"""A direct Avro binary codec between wire JSON and bytes, compiled once per schema.

fastavro interprets the schema for every value it writes or reads, and on a 2-core machine that
costs about half a microsecond per field: a 1 KB event is 40 to 90 fields, so it could not reach
the 100,000 events/s we need. This module compiles each schema once: records become generated
straight-line functions (:mod:`schemas.codegen`), everything else closures over the primitives
of :mod:`schemas.avro_io`. Writers check a wire value against the typed record and write its
Avro bytes in one pass; readers turn bytes straight back into wire JSON. It implements exactly
the Avro features our schemas use (records, enums, arrays, maps, unions, null, boolean, int,
long, double, string); anything else is rejected when the schema is compiled. fastavro stays
the reference: tests check that both produce the same bytes and the same values, and reading
across schema versions (Avro resolution) is left to fastavro.

The JSON ⇄ Avro rule is the one in :mod:`schemas.convert`: a null field is an absent key, a
typed record is written only when the value fits it exactly, else the nearest union falls back
to its JsonValue branch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dsh.json_snapshot import FrozenDict, FrozenList
from schemas.avro_io import (
    PRIMITIVE_READERS,
    PRIMITIVE_WRITERS,
    Reader,
    Writer,
    bad_index,
    long_bytes,
    read_block_count,
    read_json_value,
    read_json_value_frozen,
    read_null,
    read_str,
    write_json_value,
    write_str,
)
from schemas.codegen import RecordSource, Tagged
from schemas.convert import EVENT_TYPE_ATTR, JSON_VALUE, NoFit
from schemas.errors import CorruptRecordError, UnencodableError

# Tagged unions: a record with ``"dsh.when": {"kind": "model"}`` is the branch for values whose
# ``kind`` is "model". Look-alike records (TextBlock and ReasoningBlock have the same fields) are
# told apart by the tag, never by which happens to fit first.
WHEN_ATTR = "dsh.when"
_PLAIN = frozenset({dict, list, tuple, str, int, float, bool, type(None)})


def _tag(node: Any) -> dict[str, str] | None:
    if isinstance(node, dict) and isinstance(node.get(WHEN_ATTR), dict):
        return node[WHEN_ATTR]  # type: ignore[no-any-return]
    return None


def union_tags(nodes: Sequence[Any]) -> tuple[str | None, dict[str, int]]:
    """The tag field of a union's tagged records and tag value → position in ``nodes``."""
    field: str | None = None
    by_tag: dict[str, int] = {}
    for i, node in enumerate(nodes):
        when = _tag(node)
        if when is None:
            continue
        ((key, value),) = when.items()
        if field not in (None, key):
            raise ValueError(f"one union tags its records by both {field!r} and {key!r}")
        field = key
        by_tag[value] = i
    return field, by_tag


def _fitting_types(node: Any) -> frozenset[type] | None:
    """The plain Python types a value of this schema can have (None: unknown, try it)."""
    if isinstance(node, str):
        return {
            "string": frozenset({str}),
            "long": frozenset({int}),
            "int": frozenset({int}),
            "boolean": frozenset({bool}),
            "double": frozenset({float}),
        }.get(node)
    kind = node.get("type")
    if kind == "enum":
        return frozenset({str})
    if kind in ("record", "map"):
        return frozenset({dict})
    if kind == "array":
        return frozenset({list, tuple})
    return None


class _Compiler:
    def __init__(self, frozen_below: str | None = None) -> None:
        # Readers of every record but ``frozen_below`` (the root) build frozen containers.
        self.frozen_below = frozen_below
        self.frozen = frozen_below is not None
        self.named: dict[str, dict[str, Any]] = {}
        self.writers: dict[str, Writer] = {}
        self.readers: dict[str, Reader] = {}
        self.event_types: dict[str, str] = {}

    def register(self, node: Any) -> None:
        if isinstance(node, list):
            for b in node:
                self.register(b)
        elif isinstance(node, dict):
            kind = node["type"]
            if kind == "enum" and len(node["symbols"]) > 63:
                # Enum and union indexes are read as one byte; ours are tiny.
                raise ValueError(f"enums of more than 63 symbols are not supported: {node['name']}")
            if kind in ("record", "enum"):
                self.named[node["name"]] = node
                if EVENT_TYPE_ATTR in node:
                    self.event_types[node[EVENT_TYPE_ATTR]] = node["name"]
                for f in node.get("fields", ()):
                    self.register(f["type"])
            elif kind == "array":
                self.register(node["items"])
            elif kind == "map":
                self.register(node["values"])
            elif kind not in PRIMITIVE_WRITERS and kind != "null":
                raise ValueError(f"schema feature not supported by schemas.binary: {kind}")

    def resolve(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.named.get(node, node)
        if isinstance(node, dict) and node["type"] in PRIMITIVE_WRITERS:
            return node["type"]
        return node

    # writers ----------------------------------------------------------------------------

    def writer(self, node: Any) -> Writer:
        node = self.resolve(node)
        if isinstance(node, list):
            return self._union_writer(node)
        if isinstance(node, str):
            return PRIMITIVE_WRITERS[node]
        kind = node["type"]
        if kind == "record":
            name = node["name"]
            if name == JSON_VALUE:
                return write_json_value
            if name not in self.writers:
                self.writers[name] = lambda v, buf: self.writers[name](v, buf)  # recursion
                self.writers[name] = self._record_writer(node)
            return self.writers[name]
        if kind == "enum":
            return self._enum_writer(node["symbols"])
        if kind == "array":
            return self._array_writer(self.writer(node["items"]))
        if kind == "map":
            return self._map_writer(self.writer(node["values"]))
        raise ValueError(f"unsupported schema {node!r}")

    @staticmethod
    def _enum_writer(symbols: list[str]) -> Writer:
        index = {s: long_bytes(i) for i, s in enumerate(symbols)}

        def w_enum(v: Any, buf: bytearray) -> None:
            b = index.get(v) if type(v) is str else None
            if b is None:
                raise NoFit(f"{v!r} is not one of {symbols}")
            buf += b

        return w_enum

    @staticmethod
    def _array_writer(items: Writer) -> Writer:
        def w_array(v: Any, buf: bytearray) -> None:
            if not isinstance(v, (list, tuple)):
                raise NoFit("expected an array")
            if v:
                buf += long_bytes(len(v))
                for x in v:
                    items(x, buf)
            buf += b"\x00"

        return w_array

    @staticmethod
    def _map_writer(values: Writer) -> Writer:
        def w_map(v: Any, buf: bytearray) -> None:
            if not isinstance(v, dict):
                raise NoFit("expected an object")
            if v:
                buf += long_bytes(len(v))
                for k, x in v.items():
                    if type(k) is not str:
                        raise NoFit(f"object key {k!r} is not a string")
                    write_str(k, buf)
                    values(x, buf)
            buf += b"\x00"

        return w_map

    def _branches(
        self, branches: list[Any]
    ) -> tuple[list[tuple[bytes, Writer, Any]], bytes | None]:
        """Typed (non-null, non-JsonValue) branches as (index bytes, writer, schema node), and
        JsonValue's index bytes."""
        typed: list[tuple[bytes, Writer, Any]] = []
        json_index: bytes | None = None
        for i, b in enumerate(branches):
            node = self.resolve(b)
            if node == "null":
                continue
            if isinstance(node, dict) and node.get("name") == JSON_VALUE:
                json_index = long_bytes(i)
            else:
                typed.append((long_bytes(i), self.writer(node), node))
        return typed, json_index

    def _union_writer(self, branches: list[Any]) -> Writer:
        typed, json_index = self._branches(branches)
        tag_field, by_tag = union_tags([node for _, _, node in typed])
        tagged = {value: (typed[i][0], typed[i][1]) for value, i in by_tag.items()}
        # Untagged branches, with the Python types that can fit them: trying a branch that
        # cannot fit costs an exception, so skip those up front.
        untagged = [(index, w, _fitting_types(node)) for index, w, node in typed if not _tag(node)]

        def w_union(v: Any, buf: bytearray) -> None:
            if tag_field is not None and type(v) is dict:
                tag = v.get(tag_field)
                branch = tagged.get(tag) if type(tag) is str else None
                if branch is not None:
                    mark = len(buf)
                    buf += branch[0]
                    try:
                        branch[1](v, buf)
                        return
                    except NoFit:
                        del buf[mark:]
            t = type(v)
            for index, w, types in untagged:
                if types is not None and t not in types and t in _PLAIN:
                    continue
                mark = len(buf)
                buf += index
                try:
                    w(v, buf)
                    return
                except NoFit:
                    del buf[mark:]
            if json_index is None:
                raise NoFit(f"{type(v).__name__} fits no branch")
            buf += json_index
            write_json_value(v, buf)

        return w_union

    def _data_writer(self, branches: list[Any]) -> Callable[[Any, Any, bytearray], None]:
        names = [
            self.resolve(b).get("name") if isinstance(b, (str, dict)) else None for b in branches
        ]
        json_index = long_bytes(names.index(JSON_VALUE))
        by_type = {
            t: (long_bytes(names.index(name)), self.writer(name))
            for t, name in self.event_types.items()
            if name in names
        }

        def w_data(event_type: Any, v: Any, buf: bytearray) -> None:
            typed = by_type.get(event_type) if type(event_type) is str else None
            if typed is not None:
                mark = len(buf)
                buf += typed[0]
                try:
                    typed[1](v, buf)
                    return
                except NoFit:
                    del buf[mark:]
            buf += json_index
            write_json_value(v, buf)

        return w_data

    def _record_writer(self, node: dict[str, Any]) -> Writer:
        """Straight-line Python for one record (see RecordSource): a loop over a field plan
        spent most of its time dispatching, and records are most of what we encode."""
        src = RecordSource(node["name"])
        for f in node["fields"]:
            fname, ftype = f["name"], f["type"]
            rt = self.resolve(ftype)
            if fname == "data" and self._is_data_union(ftype):
                src.data_field(fname, self._data_writer(ftype))
            elif isinstance(rt, list) and rt and self.resolve(rt[0]) == "null":
                inner = self.resolve(rt[1]) if len(rt) == 2 else None
                if isinstance(inner, str) and inner in ("string", "long", "boolean"):
                    src.optional_primitive(fname, inner)
                else:
                    src.optional(fname, self._union_writer(rt))
            elif "default" in f:
                default = bytearray()
                self.writer(ftype)(f["default"], default)
                src.defaulted(fname, self.writer(ftype), bytes(default))
            elif isinstance(rt, str) and rt in ("string", "long", "int", "boolean"):
                src.required_primitive(fname, rt)
            elif isinstance(rt, list) and self._tagged(rt) is not None:
                src.required_tagged(fname, self._tagged(rt), self.writer(rt))  # type: ignore[arg-type]
            elif isinstance(rt, dict) and rt["type"] == "array":
                items = self.resolve(rt["items"])
                tagged = self._tagged(items) if isinstance(items, list) else None
                src.required_array(fname, tagged, self.writer(items))
            else:
                src.required(fname, self.writer(ftype))
        return src.build_writer()

    def _tagged(self, branches: list[Any]) -> Tagged | None:
        """The tagged-union description of ``branches`` (see codegen.Tagged), else None."""
        typed, _ = self._branches(branches)
        field, by_tag = union_tags([node for _, _, node in typed])
        if field is None:
            return None
        simple = {}
        for value, i in by_tag.items():
            index, _, node = typed[i]
            kinds = [(f["name"], self.resolve(f["type"])) for f in node["fields"]]
            if all(k in ("string", "long") for _, k in kinds):
                simple[value] = (index, kinds)
        return field, {value: (typed[i][0], typed[i][1]) for value, i in by_tag.items()}, simple

    def _is_data_union(self, ftype: Any) -> bool:
        return isinstance(ftype, list) and any(
            isinstance(n, dict) and EVENT_TYPE_ATTR in n for n in map(self.resolve, ftype)
        )

    # readers ----------------------------------------------------------------------------

    def reader(self, node: Any) -> Reader:
        node = self.resolve(node)
        if isinstance(node, list):
            return self._union_reader(node)
        if isinstance(node, str):
            return PRIMITIVE_READERS[node]
        kind = node["type"]
        if kind == "record":
            name = node["name"]
            if name == JSON_VALUE:
                return read_json_value_frozen if self.frozen else read_json_value
            if name not in self.readers:
                self.readers[name] = lambda d, p: self.readers[name](d, p)  # recursion
                self.readers[name] = self._record_reader(node)
            return self.readers[name]
        if kind == "enum":
            symbols = tuple(node["symbols"])

            by_byte = tuple(
                symbols[b >> 1] if b < 2 * len(symbols) else None for b in range(0, 128, 2)
            )

            def r_enum(data: bytes, pos: int) -> tuple[Any, int]:
                b = data[pos]
                symbol = by_byte[b >> 1] if b < 0x80 and not b & 1 else None
                if symbol is None:
                    raise CorruptRecordError(f"enum index out of range at offset {pos}")
                return symbol, pos + 1

            return r_enum
        if kind == "array":
            items = self.reader(node["items"])

            def r_array(data: bytes, pos: int) -> tuple[Any, int]:
                out: list[Any] = []
                n, pos = read_block_count(data, pos)
                while n:
                    for _ in range(n):
                        x, pos = items(data, pos)
                        out.append(x)
                    n, pos = read_block_count(data, pos)
                return (FrozenList(out) if frozen else out), pos

            frozen = self.frozen
            return r_array
        if kind == "map":
            values = self.reader(node["values"])

            def r_map(data: bytes, pos: int) -> tuple[Any, int]:
                out: dict[str, Any] = {}
                n, pos = read_block_count(data, pos)
                while n:
                    for _ in range(n):
                        k, pos = read_str(data, pos)
                        out[k], pos = values(data, pos)
                    n, pos = read_block_count(data, pos)
                return (FrozenDict(out) if frozen else out), pos

            frozen = self.frozen
            return r_map
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

    def _simple_branches(self, branches: list[Any]) -> dict[int, list[tuple[str, str, str | None]]]:
        """Index byte → fields (name, kind, expected tag value or None) of the branches that
        are flat records of required strings and longs (read inline by the generated code)."""
        simple: dict[int, list[tuple[str, str, str | None]]] = {}
        for i, b in enumerate(branches):
            node = self.resolve(b)
            if not (isinstance(node, dict) and node["type"] == "record"):
                continue
            if node["name"] == JSON_VALUE:
                continue
            when = _tag(node) or {}
            kinds = [(f["name"], self.resolve(f["type"])) for f in node["fields"]]
            if all(k in ("string", "long") for _, k in kinds):
                simple[2 * i] = [(f, k, when.get(f)) for f, k in kinds]
        return simple

    def _enum_branches(self, branches: list[Any]) -> dict[int, tuple[str, ...]]:
        """Index byte → symbols of the enum branches (read inline by the generated code)."""
        out: dict[int, tuple[str, ...]] = {}
        for i, b in enumerate(branches):
            node = self.resolve(b)
            if isinstance(node, dict) and node["type"] == "enum":
                out[2 * i] = tuple(node["symbols"])
        return out

    def _record_reader(self, node: dict[str, Any]) -> Reader:
        src = RecordSource(node["name"], self.frozen, node["name"] == self.frozen_below)
        for f in node["fields"]:
            fname, ftype = f["name"], f["type"]
            rt = self.resolve(ftype)
            if isinstance(rt, str) and rt in ("string", "long", "int"):
                src.read_primitive(fname, rt)
            elif isinstance(rt, list) and len(rt) == 2 and self.resolve(rt[0]) == "null":
                inner = self.resolve(rt[1])
                if isinstance(inner, str) and inner in ("string", "long"):
                    src.read_optional_primitive(fname, inner)
                else:
                    src.read_optional(fname, self.reader(rt[1]))
            elif isinstance(rt, list):
                src.read_union(
                    fname,
                    self.union_table(rt),
                    "null" in map(self.resolve, rt),
                    self._simple_branches(rt),
                    self._enum_branches(rt),
                )
            elif isinstance(rt, dict) and rt["type"] == "array":
                items = self.resolve(rt["items"])
                table, simple = None, {}
                if isinstance(items, list) and "null" not in map(self.resolve, items):
                    table, simple = self.union_table(items), self._simple_branches(items)
                src.read_array(fname, self.reader(rt), table, self.reader(items), simple)
            else:
                src.read(fname, self.reader(ftype))
        return src.build_reader()


def compile_frozen_reader(schema: dict[str, Any]) -> Reader:
    """``read(data, pos) -> (wire JSON, end)`` whose values below the top record are the core's
    FrozenDict / FrozenList, as ``dsh.json_snapshot.freeze`` would make them (the top record
    stays a plain dict: callers take envelope fields out of it). May raise
    :class:`~schemas.avro_io.TooDeep`; see ``Codec.decode_frozen``."""
    c = _Compiler(frozen_below=schema["name"])
    c.register(schema)
    return c.reader(schema)


def compile_binary(
    schema: dict[str, Any], prefix: bytes = b""
) -> tuple[Callable[[Any], bytes], Reader]:
    """``encode(wire JSON) -> prefix + body bytes`` and ``read(data, pos) -> (wire JSON, end)``.

    The prefix (the single-object header) is written into the same buffer as the body, which
    saves a copy of every record.
    """
    c = _Compiler()
    c.register(schema)
    w = c.writer(schema)
    r = c.reader(schema)
    name = schema["name"]

    def encode(v: Any) -> bytes:
        buf = bytearray(prefix)
        try:
            w(v, buf)
        except NoFit as e:
            raise UnencodableError(f"{name}: {e}") from None
        except UnicodeEncodeError as e:
            raise UnencodableError(
                f"{name}: string is not valid Unicode (lone surrogate?): {e.reason}"
            ) from None
        except RecursionError:
            raise UnencodableError(f"{name}: value nested too deeply") from None
        return bytes(buf)

    return encode, r
