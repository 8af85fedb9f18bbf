"""The projections there are, by name: what ``dsh project NAME`` and ``dsh replay`` build."""

from __future__ import annotations

from typing import Any

from projectors.audit import AuditProjection
from projectors.errors import ProjectorError
from projectors.keys import Keys
from projectors.projection import Projection
from projectors.settings import ProjectorSettings
from projectors.surface import SurfaceProjection
from projectors.transcript import TranscriptProjection
from servicekit.interpreters import parse_interpreters

PROJECTIONS = ("surface", "transcript", "audit")


def build_projection(name: str, settings: ProjectorSettings) -> Projection[Any]:
    keys = Keys(settings.key_prefix)
    if name == "surface":
        return SurfaceProjection(keys, parse_interpreters(settings.projections))
    if name == "transcript":
        return TranscriptProjection(keys)
    if name == "audit":
        return AuditProjection(keys)
    raise ProjectorError(
        f"unknown projection {name!r}; known: {', '.join(PROJECTIONS)}", code="UNKNOWN_PROJECTION"
    )
