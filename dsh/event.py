"""The v3 event envelope: :class:`Event`, :class:`Replace` and their wire (camelCase JSON) form."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from dsh.errors import SurfaceError, ValidationError
from dsh.json_snapshot import FrozenDict, FrozenList, Json, freeze, thaw

SESSION_FORMAT_VERSION = 3

WIRE_KEYS = frozenset({"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"})
_TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_valid_types: set[str] = set()


@dataclass(frozen=True, slots=True)
class Replace:
    """``surfaceOp`` putting the new event in place of the surface range ``start_seq..end_seq``."""

    start_seq: int
    end_seq: int

    def to_json(self) -> dict[str, Any]:
        return {"op": "replace", "startSeq": self.start_seq, "endSeq": self.end_seq}


# "append", a Replace, None; or, on an ignorable unknown event only, whatever JSON it carried.
SurfaceOp: TypeAlias = "Literal['append'] | Replace | Json"
Sources: TypeAlias = "tuple[int, ...] | Json"


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    seq: int
    time: int
    data: Any  # deeply immutable JSON (FrozenDict / FrozenList / scalars)
    surface_op: SurfaceOp = None
    source_event_seqs: Sources = None
    ignorable: bool = False
    # True once the surface fold (dsh.fold) ran the context-free vocabulary checks on this very
    # object, so restoring or planning it again skips them; read-only, not part of equality.
    vetted: bool = field(default=False, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        data = self.data
        t = type(data)
        if not (t is FrozenDict or t is FrozenList or t is str or t is int or data is None):
            object.__setattr__(self, "data", freeze(data))
        op = self.surface_op
        if op is not None and op != "append" and type(op) is not Replace:
            object.__setattr__(self, "surface_op", parse_surface_op(op, self.type, strict=False))
        sources = self.source_event_seqs
        if sources is not None and not (
            type(sources) is tuple and all(type(x) is int for x in sources)
        ):
            object.__setattr__(self, "source_event_seqs", parse_sources(freeze(sources)))

    def to_json(self) -> dict[str, Any]:
        """The wire shape as a plain, mutable copy; absent optional fields are omitted."""
        out: dict[str, Any] = {
            "type": self.type,
            "seq": self.seq,
            "time": self.time,
            "data": thaw(self.data),
        }
        op = self.surface_op
        if op is not None:
            out["surfaceOp"] = op.to_json() if type(op) is Replace else thaw(op)
        sources = self.source_event_seqs
        if sources is not None:
            out["sourceEventSeqs"] = list(sources) if type(sources) is tuple else thaw(sources)
        if self.ignorable:
            out["ignorable"] = True
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Event:
        """Parse one wire event; ``ValidationError`` (code ``INVALID_ENVELOPE``) if malformed.

        Values that are already frozen (FrozenDict / FrozenList, as a frozen decode gives) are
        shared, not copied; every check runs either way."""
        if type(d) is not dict and not isinstance(d, Mapping):
            raise ValidationError("event envelope must be a JSON object", code="INVALID_ENVELOPE")
        if not d.keys() <= WIRE_KEYS:
            extra = d.keys() - WIRE_KEYS
            raise ValidationError(
                f"event envelope has unknown field(s) {', '.join(sorted(map(str, extra)))}",
                code="INVALID_ENVELOPE",
            )
        try:
            type_, seq, time_, data = d["type"], d["seq"], d["time"], d["data"]
        except KeyError:
            for key in ("type", "seq", "time", "data"):
                if key not in d:
                    raise ValidationError(
                        f"event envelope lacks {key!r}", code="INVALID_ENVELOPE"
                    ) from None
            raise
        if type(seq) is not int or seq < 0:
            raise ValidationError(
                f"event seq must be an int >= 0, got {seq!r}", code="INVALID_ENVELOPE"
            )
        if type(time_) is not int:
            raise ValidationError(
                f"event {seq}: time must be an int (epoch ms), got {time_!r}",
                code="INVALID_ENVELOPE",
            )
        type_ = check_type(type_, seq)
        ignorable = False
        if "ignorable" in d:
            ignorable = d["ignorable"]
            if ignorable is not True:
                raise ValidationError(
                    f"event {seq}: ignorable must be true or absent, got {ignorable!r}",
                    code="INVALID_IGNORABLE",
                )
        op: SurfaceOp = None
        if "surfaceOp" in d:
            op = d["surfaceOp"]
            if type(op) is not str or op != "append":
                op = parse_surface_op(freeze(op, "surfaceOp"), type_, strict=False)
        sources: Sources = None
        if "sourceEventSeqs" in d:
            sources = parse_sources(freeze(d["sourceEventSeqs"], "sourceEventSeqs"))
        t = type(data)
        if not (t is FrozenDict or t is FrozenList or t is str or t is int or data is None):
            data = freeze(data)
        return Event(type_, seq, time_, data, op, sources, ignorable)


def is_int(v: object) -> bool:
    return type(v) is int


def check_type(type_: object, seq: int) -> str:
    if type(type_) is str and type_ in _valid_types:
        return type_
    if not isinstance(type_, str) or _TYPE_RE.fullmatch(type_) is None:
        raise ValidationError(
            f"event {seq}: type must look like 'family/name', got {type_!r}", code="INVALID_TYPE"
        )
    if len(_valid_types) < 4096:  # a cache of seen names, bounded against hostile input
        _valid_types.add(type_)
    return type_


def parse_surface_op(op: object, type_: str, *, strict: bool = True) -> SurfaceOp:
    """Normalize a surfaceOp; with ``strict=False`` a malformed one is kept as opaque JSON."""
    if op is None or op == "append":
        return op
    if type(op) is Replace:
        if is_int(op.start_seq) and is_int(op.end_seq):
            return op
    elif (
        isinstance(op, Mapping)
        and op.keys() == {"op", "startSeq", "endSeq"}
        and op["op"] == "replace"
        and is_int(op["startSeq"])
        and is_int(op["endSeq"])
    ):
        return Replace(op["startSeq"], op["endSeq"])
    if strict:
        raise SurfaceError(
            f'session event "{type_}" carries an invalid surfaceOp {op!r} '
            '(want "append" or {"op": "replace", "startSeq": int, "endSeq": int})',
            code="INVALID_SURFACE_OP",
        )
    opaque: Json = freeze(op, "surfaceOp")
    return opaque


def parse_sources(sources: Json) -> Sources:
    if isinstance(sources, list | tuple):
        return tuple(sources)
    return sources
