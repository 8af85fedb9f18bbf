"""Lossless, deeply immutable copies of caller-supplied JSON values.

``freeze`` copies any JSON-shaped Mapping/Sequence into :class:`FrozenDict` / :class:`FrozenList`
(subclasses of ``dict`` / ``list`` so they compare equal to plain JSON, serialize with ``json``
and ``orjson`` unchanged, and index at C speed). Already-frozen values are shared, not copied:
they were checked when they were frozen, and nothing can change them since.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, TypeAlias, cast

from dsh.errors import ValidationError

MAX_DEPTH = 128

Json: TypeAlias = "bool | int | float | str | FrozenDict | FrozenList | None"


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable (event data cannot change once logged)")


class FrozenDict(dict[str, Any]):
    """A ``dict`` whose mutators raise. Only :func:`freeze` should build one."""

    __slots__ = ()
    __setitem__ = _immutable
    __delitem__ = _immutable
    __ior__ = _immutable
    clear = _immutable
    pop = _immutable
    popitem = _immutable
    setdefault = _immutable
    update = _immutable

    def __hash__(self) -> int:  # type: ignore[override]
        raise TypeError("FrozenDict is not hashable")

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: object) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


class FrozenList(list[Any]):
    """A ``list`` whose mutators raise. Only :func:`freeze` should build one."""

    __slots__ = ()
    __setitem__ = _immutable
    __delitem__ = _immutable
    __iadd__ = _immutable
    __imul__ = _immutable
    append = _immutable
    extend = _immutable
    insert = _immutable
    pop = _immutable
    remove = _immutable
    clear = _immutable
    sort = _immutable
    reverse = _immutable

    def __hash__(self) -> int:  # type: ignore[override]
        raise TypeError("FrozenList is not hashable")

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: object) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))

    def __repr__(self) -> str:
        return f"FrozenList({list.__repr__(self)})"


EMPTY_DICT = FrozenDict()
EMPTY_LIST = FrozenList()


def _fail(code: str, what: str, path: str) -> NoReturn:
    raise ValidationError(f"{what} at {path} is not lossless JSON", code=code)


def freeze(value: object, path: str = "data") -> Json:
    """A deeply immutable copy of ``value``; ``ValidationError`` if it is not lossless JSON."""
    try:
        return _freeze(value, path, 0)
    except RecursionError:  # pragma: no cover - MAX_DEPTH keeps us well below the limit
        _fail("JSON_TOO_DEEP", "nesting", path)


def _freeze(value: object, path: str, depth: int) -> Json:
    t = type(value)
    if t is str or t is bool or t is int or value is None:
        return value  # type: ignore[return-value]
    if t is FrozenDict or t is FrozenList:
        return value  # type: ignore[return-value]
    if t is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            _fail("JSON_NOT_FINITE", repr(value), path)
        return value  # type: ignore[return-value]
    if depth >= MAX_DEPTH:
        if _has_cycle(value, set()):
            _fail("JSON_CYCLE", "a reference cycle", path)
        raise ValidationError(f"{path} nests deeper than {MAX_DEPTH} levels", code="JSON_TOO_DEEP")
    if t is dict or (isinstance(value, Mapping) and t is not FrozenDict):
        out = {}
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                if not isinstance(k, str):
                    _fail("JSON_KEY_NOT_STRING", f"key {k!r}", path)
                k = str.__str__(k)
            out[k] = _freeze(v, f"{path}.{k}" if depth < 8 else path, depth + 1)
        return FrozenDict(out)
    if (
        t is list
        or t is tuple
        or (isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray))
    ):
        return FrozenList(
            [
                _freeze(v, f"{path}[{i}]" if depth < 8 else path, depth + 1)
                for i, v in enumerate(cast("Sequence[Any]", value))
            ]
        )
    if isinstance(value, bool):  # pragma: no cover - bool cannot be subclassed
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)  # IntEnum and friends: JSON sees the number
    if isinstance(value, float):
        return _freeze(float(value), path, depth)
    _fail("JSON_UNSUPPORTED_TYPE", f"a {t.__name__} value", path)


def _has_cycle(value: object, active: set[int]) -> bool:
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Mapping | Sequence):
        return False
    if id(value) in active:
        return True
    active.add(id(value))
    children = value.values() if isinstance(value, Mapping) else value
    found = any(_has_cycle(v, active) for v in children)
    active.discard(id(value))
    return found


def thaw(value: object) -> Any:
    """A plain mutable ``dict``/``list`` copy, for callers that want to edit (``to_json``)."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value


def is_frozen(value: object) -> bool:
    """True when ``value`` is a JSON scalar or a value built by :func:`freeze`."""
    t = type(value)
    return (
        t is FrozenDict
        or t is FrozenList
        or t is str
        or t is int
        or t is bool
        or (
            value is None or (t is float and math.isfinite(value))  # type: ignore[arg-type]
        )
    )
