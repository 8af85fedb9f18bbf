"""The Avro read primitives: zigzag varints, strings, block counts, booleans, doubles and the
JsonValue union (plain, or frozen into the core's FrozenDict / FrozenList). Each takes
``(data, pos)`` and returns ``(value, new pos)``.

The native build (:mod:`schemas.native_build`) compiles this file's source, as it is, into
``schemas._native_codec`` beside the generated record readers, and readers bind those compiled
functions when the build holds this exact source (:func:`schemas.native.read_primitives`). So
the module defines functions only: a class or singleton of its own would be a second, different
object in the compiled copy, so everything it raises or builds comes from other modules.
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

from dsh.json_snapshot import MAX_DEPTH, FrozenDict, FrozenList
from schemas.errors import CorruptRecordError, TooDeep

_UNPACK_DOUBLE = struct.Struct("<d").unpack_from
_BIG_INT_TEXT = re.compile(r"-?[0-9]+\Z")


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


def read_block_count(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80 and not b & 1:  # the usual small, non-negative count
        return b >> 1, pos + 1
    n, pos = read_long(data, pos)
    if n < 0:  # a negative count is followed by the block's size in bytes
        n = -n
        _, pos = read_long(data, pos)
    return n, pos


def read_json_value(data: bytes, pos: int, depth: int = 0) -> tuple[Any, int]:
    """One JsonValue. Objects and arrays nest at most ``MAX_DEPTH`` deep, counted as the core
    counts them (the outermost container is at depth 0): deeper nesting is corrupt, refused
    before it can exhaust the stack (the compiled copy has no recursion limit of its own)."""
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
        if depth >= MAX_DEPTH:
            raise _too_deep(pos)
        out: dict[str, Any] = {}
        n, pos = read_block_count(data, pos)
        while n:
            for _ in range(n):
                k, pos = read_str(data, pos)
                out[k], pos = read_json_value(data, pos, depth + 1)
            n, pos = read_block_count(data, pos)
        return out, pos
    if branch == 12:  # array (zigzag 6)
        if depth >= MAX_DEPTH:
            raise _too_deep(pos)
        items: list[Any] = []
        n, pos = read_block_count(data, pos)
        while n:
            for _ in range(n):
                x, pos = read_json_value(data, pos, depth + 1)
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


def _too_deep(pos: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"JsonValue nested deeper than {MAX_DEPTH} levels at offset {pos - 1}"
        " (the core's limit, dsh.json_snapshot.MAX_DEPTH)"
    )


# Frozen JsonValues nest at most this deep below their root; a deeper one makes the frozen read
# give up (TooDeep) and the caller decode plainly (refused beyond MAX_DEPTH), leaving the core's
# own depth limit (dsh.json_snapshot.MAX_DEPTH, counted from the event's data, typed records
# included) to judge it exactly. Typed records above a JsonValue add only a few levels, so a
# value under this bound is well within the core's limit.
FROZEN_JSON_DEPTH = 64


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


def read_int(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = read_long(data, pos)
    if not -(2**31) <= v < 2**31:
        raise CorruptRecordError(f"int out of range at offset {pos}")
    return v, pos


BY_TYPE = {
    "boolean": read_bool,
    "int": read_int,
    "long": read_long,
    "double": read_double,
    "string": read_str,
}
