"""What every migration step shares: entries that remember their file line, the error they
raise, and dense renumbering with every seq reference remapped.

Steps work on wire dicts, not on ``dsh.Event``: an old log is not a valid v3 log until the last
step has run, so it cannot be held in the v3 types on the way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dsh.errors import FormatError
from dsh.formats.wire import is_int

UNTRANSLATABLE = "UNTRANSLATABLE"

WireEvent = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Entry:
    """One event on its way through the migrations.

    ``line`` is its 1-based line in the file it came from (``None`` when a step made the event
    up), so an error three steps later still points at something the user can open.
    ``inserted`` marks an event a step created whose references are already final seqs.
    """

    event: WireEvent
    line: int | None = None
    inserted: bool = False

    def where(self, version: int) -> str:
        # Any JSON may stand where an event should: the error about it must still be made.
        found = self.event.get("seq") if isinstance(self.event, dict) else None
        seq = f"v{version} seq {found}"
        return f"line {self.line} ({seq})" if self.line is not None else seq


def untranslatable(entry: Entry, version: int, why: str) -> FormatError:
    return FormatError(
        f"{entry.where(version)}: cannot migrate faithfully: {why}", code=UNTRANSLATABLE
    )


def check_envelope(entries: Sequence[Entry], version: int) -> None:
    """The little every step relies on: objects with a type and seqs equal to their index."""
    for index, entry in enumerate(entries):
        event = entry.event
        if not isinstance(event, dict):
            raise untranslatable(entry, version, "an event must be a JSON object")
        if not isinstance(event.get("type"), str):
            raise untranslatable(entry, version, '"type" must be a string')
        seq = event.get("seq")
        # References are seqs; renumbering can only remap them if seq and position agree.
        if not is_int(seq) or seq != index:
            raise untranslatable(
                entry, version, f'"seq" must be {index} (its position), got {seq!r}'
            )


def data_object(entry: Entry, version: int) -> dict[str, Any]:
    data = entry.event.get("data")
    if not isinstance(data, dict):
        raise untranslatable(entry, version, f"{entry.event['type']} data must be an object")
    return data


def remap_refs(
    entry: Entry,
    version: int,
    remap: Callable[[int], int | None],
    endpoint_keys: tuple[str, str],
) -> WireEvent:
    """A copy of the event with ``sourceEventSeqs`` and replace endpoints mapped by ``remap``.

    ``remap`` returns ``None`` for a seq that no longer stands for an event. On a normal event
    that is an error: a reference must never silently point at a different event. An ignorable
    event's references are opaque data that v3 never applies, so what cannot be mapped is kept.
    """
    event = dict(entry.event)
    opaque = event.get("ignorable") is True

    def one(seq: Any, field: str) -> Any:
        mapped = remap(seq) if is_int(seq) else None
        if mapped is not None:
            return mapped
        if opaque:
            return seq
        raise untranslatable(entry, version, f"{field} names seq {seq!r}, which has no counterpart")

    if "sourceEventSeqs" in event:
        seqs = event["sourceEventSeqs"]
        if isinstance(seqs, list):
            event["sourceEventSeqs"] = [one(s, "sourceEventSeqs") for s in seqs]
        elif not opaque:
            raise untranslatable(entry, version, "sourceEventSeqs must be a list of seqs")
    op = event.get("surfaceOp")
    if isinstance(op, dict) and op.get("op") == "replace":
        start, end = endpoint_keys
        if not opaque and (start not in op or end not in op):
            raise untranslatable(entry, version, f"replace surfaceOp needs {start!r} and {end!r}")
        op = dict(op)
        for key in endpoint_keys:
            if key in op:
                op[key] = one(op[key], f"surfaceOp.{key}")
        event["surfaceOp"] = op
    return event


def renumber(entries: Iterable[Entry], version: int, endpoint_keys: tuple[str, str]) -> list[Entry]:
    """Seqs become positions again; references of carried-over events follow their targets.

    Events absent from ``entries`` (folded away by a step) map to nothing, so any reference to
    them fails loudly in :func:`remap_refs`. Inserted events already cite final seqs.
    """
    kept = list(entries)
    new_seq = {e.event["seq"]: i for i, e in enumerate(kept) if not e.inserted}
    out: list[Entry] = []
    for index, entry in enumerate(kept):
        event = (
            entry.event
            if entry.inserted
            else remap_refs(entry, version, new_seq.get, endpoint_keys)
        )
        event = {**event, "seq": index}
        out.append(Entry(event, entry.line, inserted=False))
    return out
