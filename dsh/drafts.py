"""What an append's input must be before any session looks at it: a type name, lossless JSON
data and surface metadata, and a bool ``ignorable``. ``Session.append`` checks it here first;
so does ``SessionClient`` when the codec cannot encode a draft, so that it raises the core's
error class and code, as the contract promises."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dsh.errors import ValidationError
from dsh.event import Replace, SurfaceOp, check_type, parse_surface_op
from dsh.json_snapshot import freeze

Checked = tuple[str, Any, SurfaceOp, tuple[int, ...] | None]


def check_draft(
    type: object,
    data: object,
    surface_op: SurfaceOp | Mapping[str, Any] = None,
    source_event_seqs: Iterable[int] | None = None,
    ignorable: bool = False,
    seq: int = 0,
) -> Checked:
    """(type, frozen data, surface op, source seqs) of the event at ``seq``, or the core's
    ``ValidationError``."""
    type_ = check_type(type, seq)
    if ignorable is not True and ignorable is not False:
        raise ValidationError(
            f"event {seq}: ignorable must be a bool, got {ignorable!r}",
            code="INVALID_IGNORABLE",
        )
    try:
        frozen = freeze(data)
    except ValidationError as exc:
        raise ValidationError(
            f'session event "{type_}" carries non-JSON-serializable data: {exc.message}',
            code=exc.code,
        ) from exc
    if surface_op == "append" and source_event_seqs is None:
        return type_, frozen, "append", None  # the common case needs no copying or parsing
    if surface_op is None and source_event_seqs is None:
        return type_, frozen, None, None
    sources: tuple[int, ...] | None = None
    try:
        if (
            surface_op is not None
            and surface_op != "append"
            and not isinstance(surface_op, Replace)
        ):
            surface_op = freeze(surface_op, "surfaceOp")
        if source_event_seqs is not None:
            frozen_seqs: Any = freeze(list(source_event_seqs), "sourceEventSeqs")
            sources = tuple(frozen_seqs)
    except ValidationError as exc:
        raise ValidationError(
            f'session event "{type_}" carries non-JSON-serializable surface metadata: '
            f"{exc.message}",
            code=exc.code,
        ) from exc
    except TypeError as exc:
        raise ValidationError(
            f'session event "{type_}": sourceEventSeqs must be a list of ints',
            code="SOURCES_INVALID",
        ) from exc
    return type_, frozen, parse_surface_op(surface_op, type_, strict=not ignorable), sources
