"""Avro binary primitives for the compiled codec: zigzag varints, strings, doubles, the
JsonValue union, and the per-type writers and readers of the primitive types.

Readers take ``(data, pos)`` and return ``(value, new pos)``; writers append to a bytearray.
Writers raise :class:`~schemas.rules.NoFit` when a value is not of their type (the caller
may try another union branch) and UnencodableError when it is not lossless JSON at all.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsh.json_snapshot import FrozenDict, FrozenList
from schemas.errors import CorruptRecordError, UnencodableError
from schemas.rules import LONG_MAX, LONG_MIN, NoFit

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
SMALL = tuple(_zigzag_bytes(n) for n in range(4096))


def long_bytes(n: int) -> bytes:
    if 0 <= n < 4096:
        return SMALL[n]
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


def write_str(s: str, buf: bytearray) -> None:
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
    SMALL[i] for i in range(8)
)
TRUE = b"\x01"
FALSE = b"\x00"


def write_json_value(v: Any, buf: bytearray) -> None:
    t = type(v)
    if t is str:
        buf += _J_STRING
        write_str(v, buf)
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
            write_str(text, buf)
    elif t is dict:
        buf += _J_MAP
        if v:
            buf += long_bytes(len(v))
            for k, x in v.items():
                if type(k) is not str:
                    raise UnencodableError(f"JSON object key must be a string, got {k!r}")
                write_str(k, buf)
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
        buf += TRUE if v else FALSE
    elif t is float:
        if not math.isfinite(v):
            raise UnencodableError(f"JSON has no {v!r}: only finite floats are lossless")
        buf += _J_DOUBLE
        buf += _PACK_DOUBLE(v)
    elif v is None:
        buf += _J_NULL
    else:
        write_json_value(plain_json(v), buf)


def plain_json(v: Any) -> Any:
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


def read_block_count(data: bytes, pos: int) -> tuple[int, int]:
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
        n, pos = read_block_count(data, pos)
        while n:
            for _ in range(n):
                k, pos = read_str(data, pos)
                out[k], pos = read_json_value(data, pos)
            n, pos = read_block_count(data, pos)
        return out, pos
    if branch == 12:  # array (zigzag 6)
        items: list[Any] = []
        n, pos = read_block_count(data, pos)
        while n:
            for _ in range(n):
                x, pos = read_json_value(data, pos)
                items.append(x)
            n, pos = read_block_count(data, pos)
        return items, pos
    if branch == 0:  # null
        return None, pos
    if branch == 2:  # boolean
        return read_bool(data, pos)
    if branch == 6:  # double
        return read_double(data, pos)
    if branch == 10:  # BigInt
        text, pos = read_str(data, pos)
        if not _BIG_INT_TEXT.match(text):
            raise CorruptRecordError(f"BigInt {text[:40]!r} is not a decimal integer")
        try:
            return int(text), pos
        except ValueError as e:
            raise CorruptRecordError(f"BigInt too large: {e}") from None
    raise CorruptRecordError(f"JsonValue union index out of range at offset {pos - 1}")


# Frozen JsonValues nest at most this deep below their root; a deeper one makes the frozen read
# give up (TooDeep) and the caller decode plainly, leaving the core's own depth limit
# (dsh.json_snapshot.MAX_DEPTH, counted from the event's data) to judge it exactly. Typed
# records above a JsonValue add only a few levels, so a value under this bound is well within
# the core's limit.
FROZEN_JSON_DEPTH = 64


class TooDeep(Exception):
    """Internal: a frozen read met a JsonValue nested deeper than FROZEN_JSON_DEPTH."""


def read_json_value_frozen(data: bytes, pos: int) -> tuple[Any, int]:
    """:func:`read_json_value` building FrozenDict / FrozenList (see Codec.decode_frozen)."""
    return _read_json_frozen(data, pos, 0)


def _read_json_frozen(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    branch = data[pos]
    if branch == 8:  # string
        return read_str(data, pos + 1)
    if branch == 14 or branch == 12:  # map, array
        if depth >= FROZEN_JSON_DEPTH:
            raise TooDeep
        n, pos = read_block_count(data, pos + 1)
        if branch == 14:
            out: dict[str, Any] = {}
            while n:
                for _ in range(n):
                    k, pos = read_str(data, pos)
                    out[k], pos = _read_json_frozen(data, pos, depth + 1)
                n, pos = read_block_count(data, pos)
            return FrozenDict(out), pos
        items: list[Any] = []
        while n:
            for _ in range(n):
                x, pos = _read_json_frozen(data, pos, depth + 1)
                items.append(x)
            n, pos = read_block_count(data, pos)
        return FrozenList(items), pos
    return read_json_value(data, pos)  # scalars: the same as a plain read


def read_bool(data: bytes, pos: int) -> tuple[bool, int]:
    b = data[pos]
    if b > 1:
        raise CorruptRecordError(f"boolean byte {b} at offset {pos}")
    return b == 1, pos + 1


def read_double(data: bytes, pos: int) -> tuple[float, int]:
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
    write_str(v, buf)


def _w_boolean(v: Any, buf: bytearray) -> None:
    if type(v) is not bool:
        raise NoFit(f"{v!r} is not a boolean")
    buf += TRUE if v else FALSE


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


PRIMITIVE_WRITERS: dict[str, Writer] = {
    "boolean": _w_boolean,
    "int": _w_int,
    "long": _w_long,
    "double": _w_double,
    "string": _w_string,
}
PRIMITIVE_READERS: dict[str, Reader] = {
    "boolean": read_bool,
    "int": _r_int,
    "long": read_long,
    "double": read_double,
    "string": read_str,
}


class Absent:
    __slots__ = ()


ABSENT = Absent()


def read_null(data: bytes, pos: int) -> tuple[Any, int]:
    return ABSENT, pos


def bad_index(pos: int) -> CorruptRecordError:
    return CorruptRecordError(f"union index out of range at offset {pos}")
