"""Provenance: which events may cite sources, what a valid citation is, and replace coverage."""

from __future__ import annotations

from collections.abc import Sequence

from dsh.errors import ProvenanceError
from dsh.vocabulary import SOURCE_TYPES


def check_sources(type_: str, seq: int, sources: object) -> tuple[int, ...] | None:
    """Validate ``sourceEventSeqs`` of an event at ``seq``; the caller's order is kept."""
    if sources is None:
        return None
    if type_ not in SOURCE_TYPES:
        raise ProvenanceError(
            f"event {seq} ({type_}): sourceEventSeqs is not allowed on this type"
            + (" (not even empty)" if type_ == "assistant/message" else ""),
            code="SOURCES_NOT_ALLOWED",
        )
    if not isinstance(sources, tuple | list):
        raise ProvenanceError(
            f"event {seq} ({type_}): sourceEventSeqs must be a list of ints", code="SOURCES_INVALID"
        )
    if not sources:
        raise ProvenanceError(
            f"event {seq} ({type_}): sourceEventSeqs must not be empty", code="SOURCES_EMPTY"
        )
    for s in sources:
        if type(s) is not int:
            raise ProvenanceError(
                f"event {seq} ({type_}): sourceEventSeqs entry {s!r} is not an int",
                code="SOURCES_INVALID",
            )
        if s < 0 or s >= seq:
            raise ProvenanceError(
                f"event {seq} ({type_}): sourceEventSeqs entry {s} must be a non-negative seq "
                f"earlier than {seq}",
                code="SOURCES_NOT_EARLIER",
            )
    if len(set(sources)) != len(sources):
        seen: set[int] = set()
        dups = sorted({s for s in sources if s in seen or seen.add(s)})  # type: ignore[func-returns-value]
        raise ProvenanceError(
            f"event {seq} ({type_}): sourceEventSeqs has duplicates {', '.join(map(str, dups))}",
            code="SOURCES_DUPLICATE",
        )
    return tuple(sources)


def check_replace_coverage(
    seq: int, sources: Sequence[int] | None, shadowed: Sequence[int]
) -> None:
    """A replace must cite every node it shadows."""
    cited = set(sources) if sources else set()
    missing = [s for s in shadowed if s not in cited]
    if missing:
        raise ProvenanceError(
            f"surface replace at seq {seq}: sourceEventSeqs must include every shadowed surface "
            f"node; missing {', '.join(map(str, missing))}",
            code="REPLACE_SOURCES_MISSING",
        )
