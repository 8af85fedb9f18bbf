"""dsh — the pure core of dsh-pipeline: a validated, append-only log of agent-session events."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from dsh.errors import (
    ForkError,
    FormatError,
    InvariantError,
    ProjectionError,
    ProvenanceError,
    ReentrantAppendError,
    RestoreError,
    SessionError,
    SurfaceError,
    ValidationError,
)
from dsh.event import SESSION_FORMAT_VERSION, Event, Replace
from dsh.session import Session, is_append_surface_event

if TYPE_CHECKING:
    from dsh import formats as formats

__all__ = [
    "SESSION_FORMAT_VERSION",
    "Event",
    "ForkError",
    "FormatError",
    "InvariantError",
    "ProjectionError",
    "ProvenanceError",
    "ReentrantAppendError",
    "Replace",
    "RestoreError",
    "Session",
    "SessionError",
    "SurfaceError",
    "ValidationError",
    "formats",
    "is_append_surface_event",
]


def __getattr__(name: str) -> ModuleType:
    # dsh.formats imports dsh itself, so it is loaded on first use rather than at import time.
    if name == "formats":
        return importlib.import_module("dsh.formats")
    raise AttributeError(f"module 'dsh' has no attribute {name!r}")
