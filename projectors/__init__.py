"""Consumer services that build the surface, transcript and audit read models in Redis."""

from __future__ import annotations

import importlib
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    # `dsh.cli` reaches the services as `projectors.service` without importing them at its
    # own import time; a submodule is loaded on first use.
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return importlib.import_module(f"projectors.{name}")
    except ModuleNotFoundError as exc:
        raise AttributeError(f"module 'projectors' has no attribute {name!r}") from exc
