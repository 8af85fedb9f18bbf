"""Message-projection interpreters named in settings ("type=package.module:function,…")."""

from __future__ import annotations

import importlib

from dsh.projections import Interpreter
from projectors.errors import ProjectorError


def parse(spec: str) -> dict[str, Interpreter]:
    out: dict[str, Interpreter] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        event_type, sep, target = item.partition("=")
        module_name, colon, attr = target.partition(":")
        if not (sep and colon and event_type and module_name and attr):
            raise ProjectorError(
                f"projection interpreter {item!r}: expected 'event/type=package.module:function'",
                code="BAD_INTERPRETER_SPEC",
            )
        try:
            out[event_type] = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ProjectorError(
                f"projection interpreter {item!r}: {type(exc).__name__}: {exc}",
                code="BAD_INTERPRETER_SPEC",
            ) from exc
    return out
