"""A direct Avro binary codec between wire JSON and bytes, compiled once per schema.

fastavro interprets the schema for every value it writes or reads, and on a 2-core machine that
costs about half a microsecond per field: a 1 KB event is 40 to 90 fields, so it could not reach
the 100,000 events/s we need. This module compiles each schema into closures that check a wire
value against the typed record and write its Avro bytes in one pass, and read bytes straight
back into wire JSON. It implements exactly the Avro features our schemas use (records, enums,
arrays, maps, unions, null/boolean/int/long/double/string); anything else is rejected when the
schema is compiled. fastavro stays the reference: tests check that both produce the same bytes
and the same values, and reading across schema versions (Avro resolution) is left to fastavro.

The JSON ⇄ Avro rule is the one in :mod:`schemas.convert`: a null field is an absent key, a
typed record is written only when the value fits it exactly, else the nearest union falls back
to its JsonValue branch.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schemas.convert import EVENT_TYPE_ATTR, JSON_VALUE, LONG_MAX, LONG_MIN, NoFit
from schemas.errors import CorruptRecordError, UnencodableError

Writer = Callable[[Any, bytearray], None]
Reader = Callable[[bytes, int], tuple[Any, int]]

_PACK_DOUBLE = struct.Struct("<d").pack
_UNPACK_DOUBLE = struct.Struct("<d").unpack_from
_BIG_INT_TEXT = re.compile(r"-?[0-9]+\Z")


def _zigzag_bytes(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Lengths, counts, union indexes and small ints are almost always small: look them up.
_SMALL = tuple(_zigzag_bytes(n) for n in range(4096))


def long_bytes(n: int) -> bytes:
    if 0 <= n < 4096:
        return _SMALL[n]
    return _zigzag_bytes(n)


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError(f"varint longer than 10 bytes at offset {pos}")
    return (n >> 1) ^ -(n & 1), pos


def _write_str(s: str, buf: bytearray) -> None:
    try:
        b = s.encode()
    except UnicodeEncodeError as e:
        raise UnencodableError(
            f"string is not valid Unicode (lone surrogate?): {e.reason}"
        ) from None
    buf += long_bytes(len(b))
    buf += b


def read_str(data: bytes, pos: int) -> tuple[str, int]:
    n = data[pos]
    if n < 0x80:
        n = (n >> 1) ^ -(n & 1)
        pos += 1
    else:
        n, pos = read_long(data, pos)
    if n < 0:
        raise CorruptRecordError(f"negative string length at offset {pos}")
    # No upper bound check: a string that overruns leaves pos past the end, which the next
    # read or the final length check reports as truncation.
    end = pos + n
    return data[pos:end].decode(), end


# --- JsonValue ---------------------------------------------------------------------------
# Union branch order is fixed by json_value.avsc: null, boolean, long, double, string,
# BigInt, array, map.

_J_NULL, _J_BOOL, _J_LONG, _J_DOUBLE, _J_STRING, _J_BIG, _J_ARRAY, _J_MAP = (
    _SMALL[i] for i in range(8)
)
_TRUE = b"\x01"
_FALSE = b"\x00"


def write_json_value(v: Any, buf: bytearray) -> None:
    t = type(v)
    if t is str:
        buf += _J_STRING
        _write_str(v, buf)
    elif t is int:
        if LONG_MIN <= v <= LONG_MAX:
            buf += _J_LONG
            buf += long_bytes(v)
        else:
            buf += _J_BIG
            try:
                text = str(v)
            except ValueError as e:  # beyond Python's int/str conversion limit
                raise UnencodableError(f"integer too large to encode: {e}") from None
            _write_str(text, buf)
    elif t is dict:
        buf += _J_MAP
        if v:
            buf += long_bytes(len(v))
            for k, x in v.items():
                if type(k) is not str:
                    raise UnencodableError(f"JSON object key must be a string, got {k!r}")
                _write_str(k, buf)
                write_json_value(x, buf)
        buf += b"\x00"
    elif t is list or t is tuple:
        buf += _J_ARRAY
        if v:
            buf += long_bytes(len(v))
            for x in v:
                write_json_value(x, buf)
        buf += b"\x00"
    elif t is bool:
        buf += _J_BOOL
        buf += _TRUE if v else _FALSE
    elif t is float:
        if not math.isfinite(v):
            raise UnencodableError(f"JSON has no {v!r}: only finite floats are lossless")
        buf += _J_DOUBLE
        buf += _PACK_DOUBLE(v)
    elif v is None:
        buf += _J_NULL
    else:
        write_json_value(_plain(v), buf)


def _plain(v: Any) -> Any:
    """Subclasses of JSON types and other mappings/sequences, as their plain JSON type."""
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, Mapping):
        return dict(v)
    if isinstance(v, Sequence) and not isinstance(v, (bytes, bytearray, memoryview)):
        return list(v)
    raise UnencodableError(f"not a JSON value: {type(v).__name__}")


def _read_block_count(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80 and not b & 1:  # the usual small, non-negative count
        return b >> 1, pos + 1
    n, pos = read_long(data, pos)
    if n < 0:  # a negative count is followed by the block's size in bytes
        n = -n
        _, pos = read_long(data, pos)
    return n, pos


def read_json_value(data: bytes, pos: int) -> tuple[Any, int]:
    branch = data[pos]
    pos += 1
    if branch == 8:  # string (zigzag 4)
        return read_str(data, pos)
    if branch == 4:  # long (zigzag 2)
        b = data[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        return read_long(data, pos)
    if branch == 14:  # map (zigzag 7)
        out: dict[str, Any] = {}
        n, pos = _read_block_count(data, pos)
        while n:
            for _ in range(n):
                k, pos = read_str(data, pos)
                out[k], pos = read_json_value(data, pos)
            n, pos = _read_block_count(data, pos)
        return out, pos
    if branch == 12:  # array (zigzag 6)
        items: list[Any] = []
        n, pos = _read_block_count(data, pos)
        while n:
            for _ in range(n):
                x, pos = read_json_value(data, pos)
                items.append(x)
            n, pos = _read_block_count(data, pos)
        return items, pos
    if branch == 0:  # null
        return None, pos
    if branch == 2:  # boolean
        return _read_bool(data, pos)
    if branch == 6:  # double
        return _read_double(data, pos)
    if branch == 10:  # BigInt
        text, pos = read_str(data, pos)
        if not _BIG_INT_TEXT.match(text):
            raise CorruptRecordError(f"BigInt {text[:40]!r} is not a decimal integer")
        try:
            return int(text), pos
        except ValueError as e:
            raise CorruptRecordError(f"BigInt too large: {e}") from None
    raise CorruptRecordError(f"JsonValue union index out of range at offset {pos - 1}")


def _read_bool(data: bytes, pos: int) -> tuple[bool, int]:
    b = data[pos]
    if b > 1:
        raise CorruptRecordError(f"boolean byte {b} at offset {pos}")
    return b == 1, pos + 1


def _read_double(data: bytes, pos: int) -> tuple[float, int]:
    if pos + 8 > len(data):
        raise CorruptRecordError(f"double at offset {pos} overruns the record")
    (v,) = _UNPACK_DOUBLE(data, pos)
    if not math.isfinite(v):
        raise CorruptRecordError(f"non-finite double at offset {pos}: JSON cannot carry it")
    return v, pos + 8


# --- primitives --------------------------------------------------------------------------


def _w_long(v: Any, buf: bytearray) -> None:
    if type(v) is not int or not LONG_MIN <= v <= LONG_MAX:
        raise NoFit(f"{v!r} is not a long")
    buf += long_bytes(v)


def _w_int(v: Any, buf: bytearray) -> None:
    if type(v) is not int or not -(2**31) <= v < 2**31:
        raise NoFit(f"{v!r} is not an int")
    buf += long_bytes(v)


def _w_string(v: Any, buf: bytearray) -> None:
    if type(v) is not str:
        raise NoFit(f"{v!r} is not a string")
    _write_str(v, buf)


def _w_boolean(v: Any, buf: bytearray) -> None:
    if type(v) is not bool:
        raise NoFit(f"{v!r} is not a boolean")
    buf += _TRUE if v else _FALSE


def _w_double(v: Any, buf: bytearray) -> None:
    if type(v) is not float:
        raise NoFit(f"{v!r} is not a double")
    if not math.isfinite(v):
        raise UnencodableError(f"JSON has no {v!r}: only finite floats are lossless")
    buf += _PACK_DOUBLE(v)


def _r_int(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = read_long(data, pos)
    if not -(2**31) <= v < 2**31:
        raise CorruptRecordError(f"int out of range at offset {pos}")
    return v, pos


_WRITERS: dict[str, Writer] = {
    "boolean": _w_boolean,
    "int": _w_int,
    "long": _w_long,
    "double": _w_double,
    "string": _w_string,
}
_READERS: dict[str, Reader] = {
    "boolean": _read_bool,
    "int": _r_int,
    "long": read_long,
    "double": _read_double,
    "string": read_str,
}


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
    def __init__(self) -> None:
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
            elif kind not in _WRITERS and kind != "null":
                raise ValueError(f"schema feature not supported by schemas.binary: {kind}")

    def resolve(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.named.get(node, node)
        if isinstance(node, dict) and node["type"] in _WRITERS:
            return node["type"]
        return node

    # writers ----------------------------------------------------------------------------

    def writer(self, node: Any) -> Writer:
        node = self.resolve(node)
        if isinstance(node, list):
            return self._union_writer(node)
        if isinstance(node, str):
            return _WRITERS[node]
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
                    _write_str(k, buf)
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
        """Straight-line Python for one record (see _RecordSource): a loop over a field plan
        spent most of its time dispatching, and records are most of what we encode."""
        src = _RecordSource(node["name"])
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

    def _tagged(self, branches: list[Any]) -> tuple[str, dict[str, tuple[bytes, Writer]]] | None:
        """(tag field, tag value → (index bytes, record writer)) of a tagged union, else None."""
        typed, _ = self._branches(branches)
        field, by_tag = union_tags([node for _, _, node in typed])
        if field is None:
            return None
        return field, {value: (typed[i][0], typed[i][1]) for value, i in by_tag.items()}

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
            return _READERS[node]
        kind = node["type"]
        if kind == "record":
            name = node["name"]
            if name == JSON_VALUE:
                return read_json_value
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
                n, pos = _read_block_count(data, pos)
                while n:
                    for _ in range(n):
                        x, pos = items(data, pos)
                        out.append(x)
                    n, pos = _read_block_count(data, pos)
                return out, pos

            return r_array
        if kind == "map":
            values = self.reader(node["values"])

            def r_map(data: bytes, pos: int) -> tuple[Any, int]:
                out: dict[str, Any] = {}
                n, pos = _read_block_count(data, pos)
                while n:
                    for _ in range(n):
                        k, pos = read_str(data, pos)
                        out[k], pos = values(data, pos)
                    n, pos = _read_block_count(data, pos)
                return out, pos

            return r_map
        raise ValueError(f"unsupported schema {node!r}")

    def union_table(self, branches: list[Any]) -> tuple[Reader | None, ...]:
        """Union readers indexed by the raw index byte (zigzag 2i): one lookup, no varint."""
        if len(branches) > 63:
            raise ValueError("unions of more than 63 branches are not supported")
        table: list[Reader | None] = [None] * 128
        for i, b in enumerate(branches):
            table[2 * i] = _r_null if self.resolve(b) == "null" else self.reader(b)
        return tuple(table)

    def _union_reader(self, branches: list[Any]) -> Reader:
        table = self.union_table(branches)

        def r_union(data: bytes, pos: int) -> tuple[Any, int]:
            b = data[pos]
            r = table[b] if b < 128 else None
            if r is None:
                raise _bad_index(pos)
            return r(data, pos + 1)

        return r_union

    def _record_reader(self, node: dict[str, Any]) -> Reader:
        src = _RecordSource(node["name"])
        for f in node["fields"]:
            fname, ftype = f["name"], f["type"]
            rt = self.resolve(ftype)
            if isinstance(rt, str) and rt in ("string", "long"):
                src.read_primitive(fname, rt)
            elif isinstance(rt, list) and len(rt) == 2 and self.resolve(rt[0]) == "null":
                inner = self.resolve(rt[1])
                if isinstance(inner, str) and inner in ("string", "long"):
                    src.read_optional_primitive(fname, inner)
                else:
                    src.read_optional(fname, self.reader(rt[1]))
            elif isinstance(rt, list):
                src.read_union(fname, self.union_table(rt), "null" in map(self.resolve, rt))
            elif isinstance(rt, dict) and rt["type"] == "array":
                items = self.resolve(rt["items"])
                table = None
                if isinstance(items, list) and "null" not in map(self.resolve, items):
                    table = self.union_table(items)
                src.read_array(fname, self.reader(rt), table, self.reader(items))
            else:
                src.read(fname, self.reader(ftype))
        return src.build_reader()


class _Absent:
    __slots__ = ()


_ABSENT = _Absent()


def _r_null(data: bytes, pos: int) -> tuple[Any, int]:
    return _ABSENT, pos


# --- generated record code ---------------------------------------------------------------
# Like dataclasses, we build each record's writer and reader as Python source once, at schema
# compile time: straight-line code with the common field kinds (strings, longs, absent optional
# fields) inlined runs about twice as fast as a generic loop over the fields.

_MISSING = object()


def _no_fit(record: str, what: str) -> NoFit:
    return NoFit(f"{record}: {what}")


def _unexpected(record: str, v: Mapping[str, Any], known: frozenset[str]) -> NoFit:
    return NoFit(f"{record}: unexpected keys {sorted(set(v) - known)}")


def _overrun(pos: int, n: int) -> CorruptRecordError:
    return CorruptRecordError(f"string length {n} at offset {pos} is negative")


def _bad_index(pos: int) -> CorruptRecordError:
    return CorruptRecordError(f"union index out of range at offset {pos}")


def _as_dict(v: Any, record: str) -> dict[str, Any]:
    if isinstance(v, Mapping):
        return dict(v)
    raise NoFit(f"{record}: expected an object")


_WRITE_CHECKS = {
    "string": "type(x) is str",
    "long": "type(x) is int and -9223372036854775808 <= x <= 9223372036854775807",
    "int": "type(x) is int and -2147483648 <= x <= 2147483647",
    "boolean": "type(x) is bool",
}
_WRITE_BODY = {
    "string": [
        "b = x.encode()",
        "n = len(b)",
        "buf += SMALL[n] if n < 4096 else long_bytes(n)",
        "buf += b",
    ],
    "long": ["buf += SMALL[x] if 0 <= x < 4096 else long_bytes(x)"],
    "int": ["buf += SMALL[x] if 0 <= x < 4096 else long_bytes(x)"],
    "boolean": ["buf += TRUE if x else FALSE"],
}


def _read_lines(kind: str, target: str) -> list[str]:
    if kind == "long":
        return [
            "b = data[pos]",
            "if b < 0x80:",
            f"    {target} = (b >> 1) ^ -(b & 1)",
            "    pos += 1",
            "else:",
            f"    {target}, pos = read_long(data, pos)",
        ]
    return [
        "n = data[pos]",
        "if n < 0x80:",
        "    n = (n >> 1) ^ -(n & 1)",
        "    pos += 1",
        "else:",
        "    n, pos = read_long(data, pos)",
        "if n < 0:",
        "    raise overrun(pos, n)",
        "end = pos + n",
        f"{target} = data[pos:end].decode()",
        "pos = end",
    ]


class _RecordSource:
    """Accumulates the source of one record's writer and reader."""

    def __init__(self, record: str) -> None:
        self.record = record
        self.names: list[str] = []
        self.ns: dict[str, Any] = {
            "NoFit": NoFit,
            "MISSING": _MISSING,
            "ABSENT": _ABSENT,
            "SMALL": _SMALL,
            "TRUE": _TRUE,
            "FALSE": _FALSE,
            "long_bytes": long_bytes,
            "read_long": read_long,
            "no_fit": _no_fit,
            "unexpected": _unexpected,
            "as_dict": _as_dict,
            "overrun": _overrun,
            "bad_index": _bad_index,
            "block_count": _read_block_count,
            "r_null": _r_null,
            "RECORD": record,
            "NULL_BRANCH": _SMALL[0],  # union index 0, null: the key is absent
            "SECOND_BRANCH": _SMALL[1],
        }
        self.w: list[str] = []
        self.r: list[str] = []
        self.locals: list[tuple[str, str]] = []
        self.flushed = False

    def _bind(self, obj: Any) -> str:
        name = f"F{len(self.ns)}"
        self.ns[name] = obj
        return name

    def _get_required(self, fname: str) -> None:
        self.names.append(fname)
        self.w += [
            "try:",
            f"    x = v[{fname!r}]",
            "except KeyError:",
            f"    raise no_fit(RECORD, 'missing {fname}') from None",
        ]

    def _get(self, fname: str) -> None:
        self.names.append(fname)
        self.w.append(f"x = v.get({fname!r}, MISSING)")

    # writer pieces
    def required_primitive(self, fname: str, kind: str) -> None:
        self._get_required(fname)
        self.w += [
            f"if not ({_WRITE_CHECKS[kind]}):",
            f"    raise no_fit(RECORD, {fname!r} + ': expected {kind}, got ' + repr(x))",
            *_WRITE_BODY[kind],
            "seen += 1",
        ]

    def optional_primitive(self, fname: str, kind: str) -> None:
        self._get(fname)
        self.w += [
            "if x is MISSING:",
            "    buf += NULL_BRANCH",
            "else:",
            f"    if not ({_WRITE_CHECKS[kind]}):",
            f"        raise no_fit(RECORD, {fname!r} + ': expected {kind}, got ' + repr(x))",
            "    buf += SECOND_BRANCH",
            *("    " + line for line in _WRITE_BODY[kind]),
            "    seen += 1",
        ]

    def optional(self, fname: str, writer: Writer) -> None:
        self._get(fname)
        w = self._bind(writer)
        self.w += [
            "if x is MISSING:",
            "    buf += NULL_BRANCH",
            "else:",
            f"    {w}(x, buf)",
            "    seen += 1",
        ]

    def defaulted(self, fname: str, writer: Writer, default: bytes) -> None:
        self._get(fname)
        w, d = self._bind(writer), self._bind(default)
        self.w += [
            "if x is MISSING:",
            f"    buf += {d}",
            "else:",
            f"    {w}(x, buf)",
            "    seen += 1",
        ]

    def required(self, fname: str, writer: Writer) -> None:
        self._get_required(fname)
        w = self._bind(writer)
        self.w += [
            f"{w}(x, buf)",
            "seen += 1",
        ]

    def _tagged_lines(
        self, target: str, tagged: tuple[str, dict[str, tuple[bytes, Writer]]], general: Writer
    ) -> list[str]:
        """Write ``target`` through its tagged branch; on a misfit (rare) the general union
        writer starts over and ends in the JsonValue branch."""
        field, table = tagged
        t, g = self._bind(table), self._bind(general)
        return [
            f"if type({target}) is dict:",
            f"    tag = {target}.get({field!r})",
            f"    br = {t}.get(tag) if type(tag) is str else None",
            "else:",
            "    br = None",
            "if br is None:",
            f"    {g}({target}, buf)",
            "else:",
            "    mark = len(buf)",
            "    buf += br[0]",
            "    try:",
            f"        br[1]({target}, buf)",
            "    except NoFit:",
            "        del buf[mark:]",
            f"        {g}({target}, buf)",
        ]

    def required_tagged(
        self, fname: str, tagged: tuple[str, dict[str, tuple[bytes, Writer]]], general: Writer
    ) -> None:
        self._get_required(fname)
        self.w += [
            *self._tagged_lines("x", tagged, general),
            "seen += 1",
        ]

    def required_array(
        self,
        fname: str,
        tagged: tuple[str, dict[str, tuple[bytes, Writer]]] | None,
        item: Writer,
    ) -> None:
        self._get_required(fname)
        if tagged is not None:
            write_item = self._tagged_lines("y", tagged, item)
        else:
            write_item = [f"{self._bind(item)}(y, buf)"]
        self.w += [
            "if type(x) is not list and not isinstance(x, (list, tuple)):",
            f"    raise no_fit(RECORD, '{fname}: expected an array')",
            "if x:",
            "    n = len(x)",
            "    buf += SMALL[n] if n < 4096 else long_bytes(n)",
            "    for y in x:",
            *("        " + line for line in write_item),
            "buf += NULL_BRANCH",  # the 0 that ends the array
            "seen += 1",
        ]

    def data_field(self, fname: str, writer: Callable[[Any, Any, bytearray], None]) -> None:
        self._get_required(fname)
        w = self._bind(writer)
        self.w += [
            f"{w}(v.get('type'), x, buf)",
            "seen += 1",
        ]

    def build_writer(self) -> Writer:
        known = self._bind(frozenset(self.names))
        body = [
            "if type(v) is not dict:",
            "    v = as_dict(v, RECORD)",
            "seen = 0",
            *self.w,
            "if seen != len(v):",
            f"    raise unexpected(RECORD, v, {known})",
        ]
        return self._compile("w_record", "v, buf", body)

    # reader pieces
    # Required fields are read into locals and the dict is built by one literal at the first
    # optional field (or the end): cheaper than a store per key, and keys keep schema order.
    def _target(self, fname: str) -> str:
        if self.flushed:
            return f"out[{fname!r}]"
        local = f"v{len(self.locals)}"
        self.locals.append((fname, local))
        return local

    def _flush(self) -> None:
        if not self.flushed:
            self.r.append("out = {" + ", ".join(f"{f!r}: {v}" for f, v in self.locals) + "}")
            self.flushed = True

    def read_primitive(self, fname: str, kind: str) -> None:
        self.r += _read_lines(kind, self._target(fname))

    def read_optional_primitive(self, fname: str, kind: str) -> None:
        self._flush()
        self.r += [
            "b = data[pos]",
            "if b == 0:",
            "    pos += 1",
            "elif b == 2:",
            "    pos += 1",
            *("    " + line for line in _read_lines(kind, f"out[{fname!r}]")),
            "else:",
            "    raise bad_index(pos)",
        ]

    def read_optional(self, fname: str, reader: Reader) -> None:
        self._flush()
        r = self._bind(reader)
        self.r += [
            "b = data[pos]",
            "if b == 0:",
            "    pos += 1",
            "elif b == 2:",
            f"    out[{fname!r}], pos = {r}(data, pos + 1)",
            "else:",
            "    raise bad_index(pos)",
        ]

    def read_union(self, fname: str, table: tuple[Reader | None, ...], has_null: bool) -> None:
        t = self._bind(table)
        self.r += [
            "b = data[pos]",
            f"r = {t}[b] if b < 128 else None",
            "if r is None:",
            "    raise bad_index(pos)",
        ]
        if has_null:
            self._flush()
            self.r += [
                "if r is not r_null:",
                "    x, pos = r(data, pos + 1)",
                "    if x is not ABSENT:",
                f"        out[{fname!r}] = x",
                "else:",
                "    pos += 1",
            ]
        else:
            self.r.append(f"{self._target(fname)}, pos = r(data, pos + 1)")

    def read_array(
        self,
        fname: str,
        general: Reader,
        item_table: tuple[Reader | None, ...] | None,
        item: Reader,
    ) -> None:
        """Inline the usual case, a first block with a small count; anything else (counts of 64
        or more, negative counts) goes to the general array reader."""
        g, it = self._bind(general), self._bind(item)
        if item_table is not None:
            t = self._bind(item_table)
            read_item = [
                "    b = data[pos]",
                f"    r = {t}[b] if b < 128 else None",
                "    if r is None:",
                "        raise bad_index(pos)",
                "    x, pos = r(data, pos + 1)",
            ]
        else:
            read_item = [f"    x, pos = {it}(data, pos)"]
        target = self._target(fname)
        self.r += [
            "n = data[pos]",
            "if n == 0:",
            f"    {target} = []",
            "    pos += 1",
            "elif n < 0x80 and not n & 1:",
            "    pos += 1",
            "    items = []",
            "    for _ in range(n >> 1):",
            *("    " + line for line in read_item),
            "        items.append(x)",
            "    while data[pos] != 0:",  # more blocks: legal, rare
            "        m, pos = block_count(data, pos)",
            "        for _ in range(m):",
            f"            x, pos = {it}(data, pos)",
            "            items.append(x)",
            "    pos += 1",
            f"    {target} = items",
            "else:",
            f"    {target}, pos = {g}(data, pos)",
        ]

    def read(self, fname: str, reader: Reader) -> None:
        r = self._bind(reader)
        self.r.append(f"{self._target(fname)}, pos = {r}(data, pos)")

    def build_reader(self) -> Reader:
        self._flush()
        body = [*self.r, "return out, pos"]
        return self._compile("r_record", "data, pos", body)

    def _compile(self, fn: str, args: str, body: list[str]) -> Callable[..., Any]:
        src = f"def {fn}({args}):\n" + "".join(f"    {line}\n" for line in body)
        exec(compile(src, f"<schemas.binary {self.record} {fn}>", "exec"), self.ns)
        return self.ns[fn]  # type: ignore[no-any-return]


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
