"""Strict JSON Lines codec: one lossless JSON value per ``\\n``-terminated line, with size bounds.

Only ``\\n`` ends a line. ``str.splitlines`` also splits on U+2028, form feeds and friends,
which are legal unescaped inside JSON strings, so it would tear valid records apart.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from dsh.errors import FormatError

MALFORMED_LINE = "MALFORMED_LINE"
TOO_LARGE = "TOO_LARGE"

PathLike = str | os.PathLike[str]
Source = PathLike | Iterable[str | bytes]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on untrusted input, checked before the bytes are parsed."""

    max_line_bytes: int = 16 * 1024 * 1024
    max_file_bytes: int = 1024 * 1024 * 1024


DEFAULT_LIMITS = Limits()


def is_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass; ``"seq": true`` must not read as seq 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not lossless JSON")


def _finite_float(text: str) -> float:
    # json.loads turns 1e400 into inf, which the log forbids and could never write back.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} does not fit a finite float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A duplicate key silently keeps the last value in json.loads; that is lossy.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return obj


# One decoder for every line: json.loads with hooks would build a new one per call.
_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
)


def decode_line(text: str | bytes, line: int) -> Any:
    """Parse one line; any problem is a ``FormatError`` naming the 1-based line number."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeError are ValueErrors
        raise FormatError(f"line {line}: malformed JSON: {exc}", code=MALFORMED_LINE) from exc


def encode_line(value: Any) -> bytes:
    """One compact line, newline included; refuses values that would not read back equal."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8") + b"\n"


def _too_long(line: int, limits: Limits) -> FormatError:
    return FormatError(
        f"line {line}: longer than the {limits.max_line_bytes}-byte line limit", code=TOO_LARGE
    )


def _too_big(limits: Limits) -> FormatError:
    return FormatError(
        f"session file larger than the {limits.max_file_bytes}-byte limit", code=TOO_LARGE
    )


def _strip_newline(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw


def iter_file_lines(path: PathLike, limits: Limits = DEFAULT_LIMITS) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes without newline)``; holds one bounded line in memory at a time."""
    if os.stat(path).st_size > limits.max_file_bytes:
        raise _too_big(limits)
    with open(path, "rb") as fh:
        number = 0
        while True:
            # Reading one byte past the limit tells an over-long line from one that fits exactly.
            raw = fh.readline(limits.max_line_bytes + 2)
            if not raw:
                return
            number += 1
            body = _strip_newline(raw)
            if len(body) > limits.max_line_bytes:
                raise _too_long(number, limits)
            yield number, body


def iter_source_lines(
    source: Source, limits: Limits = DEFAULT_LIMITS
) -> Iterator[tuple[int, bytes]]:
    """Lines from a path (``str`` or path-like) or from an iterable of lines (``str``/``bytes``)."""
    if isinstance(source, str | os.PathLike):
        yield from iter_file_lines(source, limits)
        return
    total = 0
    for number, item in enumerate(source, start=1):
        raw = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        total += len(raw)
        if total > limits.max_file_bytes:
            raise _too_big(limits)
        body = _strip_newline(raw)
        if len(body) > limits.max_line_bytes:
            raise _too_long(number, limits)
        yield number, body
