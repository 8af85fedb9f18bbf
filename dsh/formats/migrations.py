"""The catalog of format versions: adjacent steps, applied in order, never skipped or guessed."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsh.errors import FormatError
from dsh.formats import v0_to_v1, v1_to_v2, v2_to_v3
from dsh.formats.header import SESSION_FORMAT_VERSION
from dsh.formats.log import Entry, WireEvent, check_envelope

FUTURE_VERSION = "FUTURE_VERSION"
NO_ROUTE = "NO_MIGRATION_ROUTE"


@dataclass(frozen=True, slots=True)
class Migration:
    source: int
    apply: Callable[[Sequence[Entry]], list[Entry]]
    summary: str

    @property
    def target(self) -> int:
        # Steps are adjacent by construction, so a registry cannot hide a jump of two versions.
        return self.source + 1


MIGRATIONS: Mapping[int, Migration] = {
    m.source: m
    for m in (
        Migration(0, v0_to_v1.migrate, "legacy names steering/message and compact/*"),
        Migration(1, v1_to_v2.migrate, "assistant/chunk events folded into streams"),
        Migration(2, v2_to_v3.migrate, "system prompt from request headers onto the surface"),
    )
}


def migrate_entries(
    version: int,
    entries: Sequence[Entry],
    registry: Mapping[int, Migration] = MIGRATIONS,
    target: int = SESSION_FORMAT_VERSION,
) -> list[Entry]:
    if version > target:
        raise FormatError(
            f"session format version {version} is newer than this reader ({target})",
            code=FUTURE_VERSION,
        )
    # Check the whole route first: a missing step is a property of the version, not of the log.
    missing = [v for v in range(version, target) if v not in registry]
    if version < 0 or missing:
        raise FormatError(
            f"no migration route from session format version {version} to {target}"
            + (f" (no step from version {missing[0]})" if missing else ""),
            code=NO_ROUTE,
        )
    current = list(entries)
    while version < target:
        check_envelope(current, version)
        current = registry[version].apply(current)
        version = registry[version].target
    check_envelope(current, version)
    return current


def migrate(
    version: int,
    events: Sequence[Any],
    registry: Mapping[int, Migration] = MIGRATIONS,
    target: int = SESSION_FORMAT_VERSION,
) -> list[WireEvent]:
    """Wire dicts of format ``version`` → wire dicts of ``target``; the input is left untouched."""
    entries = [Entry(copy.deepcopy(e)) for e in events]
    return [e.event for e in migrate_entries(version, entries, registry, target)]
