"""Avro binary primitives for the compiled codec: zigzag varints, strings, doubles, the
JsonValue union and the per-type writers, and what the generated readers share (``ABSENT``,
``read_null``, ``bad_index``). The read primitives are :mod:`schemas.avro_read`.

Writers append to a bytearray. They raise :class:`~schemas.rules.NoFit` when a value is not
of their type (the caller may try another union branch) and UnencodableError when it is not
lossless JSON at all.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsh.json_snapshot import MAX_DEPTH
from schemas.errors import CorruptRecordError, UnencodableError
from schemas.rules import LONG_MAX, LONG_MIN, NoFit

Writer = Callable[[Any, bytearray], None]
Reader = Callable[[bytes, int], tuple[Any, int]]

_PACK_DOUBLE = struct.Struct("<d").pack


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


def write_str(s: str, buf: bytearray) -> None:
    try:
        b = s.encode()
    except UnicodeEncodeError as e:
        raise UnencodableError(
            f"string is not valid Unicode (lone surrogate?): {e.reason}"
        ) from None
    buf += long_bytes(len(b))
    buf += b


# --- JsonValue ---------------------------------------------------------------------------
# Union branch order is fixed by json_value.avsc: null, boolean, long, double, string,
# BigInt, array, map.

_J_NULL, _J_BOOL, _J_LONG, _J_DOUBLE, _J_STRING, _J_BIG, _J_ARRAY, _J_MAP = (
    SMALL[i] for i in range(8)
)
TRUE = b"\x01"
FALSE = b"\x00"


def write_json_value(v: Any, buf: bytearray, depth: int = 0) -> None:
    """One JsonValue; objects and arrays nested deeper than ``MAX_DEPTH`` are unencodable, as
    the readers refuse them (``avro_read.read_json_value``): a record is never sent that its
    reader would dead-letter."""
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
        if depth >= MAX_DEPTH:
            raise _too_deep()
        buf += _J_MAP
        if v:
            buf += long_bytes(len(v))
            for k, x in v.items():
                if type(k) is not str:
                    raise UnencodableError(f"JSON object key must be a string, got {k!r}")
                write_str(k, buf)
                write_json_value(x, buf, depth + 1)
        buf += b"\x00"
    elif t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise _too_deep()
        buf += _J_ARRAY
        if v:
            buf += long_bytes(len(v))
            for x in v:
                write_json_value(x, buf, depth + 1)
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
        write_json_value(plain_json(v), buf, depth)


def _too_deep() -> UnencodableError:
    return UnencodableError(f"JSON nested deeper than {MAX_DEPTH} levels (the core's limit)")


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


PRIMITIVE_WRITERS: dict[str, Writer] = {
    "boolean": _w_boolean,
    "int": _w_int,
    "long": _w_long,
    "double": _w_double,
    "string": _w_string,
}


class Absent:
    __slots__ = ()


ABSENT = Absent()


def read_null(data: bytes, pos: int) -> tuple[Any, int]:
    return ABSENT, pos


def bad_index(pos: int) -> CorruptRecordError:
    return CorruptRecordError(f"union index out of range at offset {pos}")
