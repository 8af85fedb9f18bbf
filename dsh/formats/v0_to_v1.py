"""v0 → v1: the legacy event names. Nothing else differs, so seqs stay as they are."""

from __future__ import annotations

from collections.abc import Sequence

from dsh.formats.log import Entry

_RENAMED = {"steering/message": "user/message"}
_LEGACY_FAMILY, _FAMILY = "compact/", "compaction/"


def _new_type(old: str) -> str:
    if old in _RENAMED:
        return _RENAMED[old]
    if old.startswith(_LEGACY_FAMILY):
        return _FAMILY + old.removeprefix(_LEGACY_FAMILY)
    return old


def migrate(entries: Sequence[Entry]) -> list[Entry]:
    return [
        Entry({**e.event, "type": _new_type(e.event["type"])}, e.line, e.inserted) for e in entries
    ]
