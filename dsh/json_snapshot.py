"""Lossless, deeply immutable copies of caller-supplied JSON values.

``freeze`` copies any JSON-shaped Mapping/Sequence into :class:`FrozenDict` / :class:`FrozenList`
(subclasses of ``dict`` / ``list`` so they compare equal to plain JSON, serialize with ``json``
and ``orjson`` unchanged, and index at C speed). Already-frozen values are shared, not copied:
they were checked when they were frozen, and nothing can change them since; only their height
(remembered on each container) still counts toward ``MAX_DEPTH`` where they are placed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeAlias

from dsh.errors import ValidationError

MAX_DEPTH = 128

Json: TypeAlias = "bool | int | float | str | FrozenDict | FrozenList | None"


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable (event data cannot change once logged)")


class FrozenDict(dict[str, Any]):
    """A ``dict`` whose mutators raise. Only :func:`freeze` should build one."""

    __slots__ = ("_height",)  # see _height
    _height: int
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

    __slots__ = ("_height",)  # see _height
    _height: int
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


class _Bad(Exception):
    """Internal: unwinds to :func:`freeze`, collecting the path on the way (no cost when unused)."""

    def __init__(self, code: str, what: str) -> None:
        self.code = code
        self.what = what
        self.path: list[str] = []


_SCALAR_TYPES = frozenset({str, int, bool, type(None)})


def freeze(value: object, path: str = "data") -> Any:
    """A deeply immutable copy of ``value``; ``ValidationError`` if it is not lossless JSON."""
    t = type(value)
    try:
        if t is dict:
            return _freeze_dict(value, 0)  # type: ignore[arg-type]
        if t is list:
            return _freeze_list(value, 0)  # type: ignore[arg-type]
        return _freeze_other(value, 0)
    except _Bad as bad:
        steps = bad.path[::-1]
        where = path + "".join(steps[:12]) + ("..." if len(steps) > 12 else "")
        message = f"{bad.what} at {where} is not lossless JSON"
        raise ValidationError(message, code=bad.code) from None


def _freeze_dict(d: Mapping[Any, Any], depth: int) -> FrozenDict:
    if depth >= MAX_DEPTH:
        _too_deep(d)
    out: dict[str, Any] = {}
    k: Any = None
    try:
        for k, v in d.items():
            if k.__class__ is not str:
                if not isinstance(k, str):
                    raise _Bad("JSON_KEY_NOT_STRING", f"key {k!r}")
                k = str.__str__(k)
            t = v.__class__
            if t in _SCALAR_TYPES:
                out[k] = v
            elif t is dict:
                out[k] = _freeze_dict(v, depth + 1)
            elif t is list:
                out[k] = _freeze_list(v, depth + 1)
            else:
                out[k] = _freeze_other(v, depth + 1)
    except _Bad as bad:
        bad.path.append(f".{k}")
        raise
    return FrozenDict(out)


def _freeze_list(seq: Sequence[Any], depth: int) -> FrozenList:
    if depth >= MAX_DEPTH:
        _too_deep(seq)
    out: list[Any] = []
    append = out.append
    i = -1
    try:
        for i, v in enumerate(seq):  # noqa: B007 - ``i`` is read by the except clause
            t = v.__class__
            if t in _SCALAR_TYPES:
                append(v)
            elif t is dict:
                append(_freeze_dict(v, depth + 1))
            else:
                append(_freeze_other(v, depth + 1))
    except _Bad as bad:
        bad.path.append(f"[{i}]")
        raise
    return FrozenList(out)


def _freeze_other(value: object, depth: int) -> Any:
    t = type(value)
    if t in _SCALAR_TYPES:
        return value
    if t is FrozenDict or t is FrozenList:
        # Shared, not copied; but placed below the root it nests deeper than where it was
        # checked (data wrapping another event's data), so its height counts. A frozen root
        # was judged where it was made: freeze, or the codec's frozen reads (well within).
        if depth and depth + _height(value) > MAX_DEPTH:  # type: ignore[arg-type]
            _too_deep(value)
        return value
    if t is float:
        if value - value != 0.0:  # type: ignore[operator]  # NaN and ±Infinity, without a call
            raise _Bad("JSON_NOT_FINITE", repr(value))
        return value
    if t is list or t is tuple:
        return _freeze_list(value, depth)  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        return _freeze_dict(value, depth)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return _freeze_list(value, depth)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)  # IntEnum and friends: JSON sees the number
    if isinstance(value, float):
        return _freeze_other(float(value), depth)
    raise _Bad("JSON_UNSUPPORTED_TYPE", f"a {t.__name__} value")


def _height(value: FrozenDict | FrozenList) -> int:
    """Levels of containers in ``value``, itself included; remembered on each container, so a
    frozen value shared again and again is measured once."""
    try:
        return value._height
    except AttributeError:
        pass
    height = 0
    items: Iterable[Any] = value.values() if type(value) is FrozenDict else value
    for v in items:
        t = v.__class__
        if t is FrozenDict or t is FrozenList:
            h = _height(v)
            if h > height:
                height = h
    value._height = height + 1
    return height + 1


def _too_deep(value: object) -> NoReturn:
    if _has_cycle(value):
        raise _Bad("JSON_CYCLE", "a reference cycle")
    raise _Bad("JSON_TOO_DEEP", f"nesting deeper than {MAX_DEPTH} levels")


def _has_cycle(root: object) -> bool:
    # Iterative: the value may nest far deeper than the recursion limit.
    def children(v: object) -> Iterator[object]:
        if isinstance(v, Mapping):
            return iter(v.values())
        if isinstance(v, Sequence) and not isinstance(v, str | bytes | bytearray):
            return iter(v)
        return iter(())

    on_path = {id(root)}
    stack = [(root, children(root))]
    while stack:
        node, it = stack[-1]
        child = next(it, _DONE)
        if child is _DONE:
            stack.pop()
            on_path.discard(id(node))
            continue
        if isinstance(child, Mapping | Sequence) and not isinstance(child, str | bytes | bytearray):
            if id(child) in on_path:
                return True
            on_path.add(id(child))
            stack.append((child, children(child)))
    return False


_DONE = object()


def same_json(a: object, b: object) -> bool:
    """Equal as JSON, types included: unlike ``==``, ``true``, ``1`` and ``1.0`` differ."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return False
        return all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        return all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def thaw(value: object) -> Any:
    """A plain mutable ``dict``/``list`` copy, for callers that want to edit (``to_json``)."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value
