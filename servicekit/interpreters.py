"""Loading message-projection interpreters named in settings.

A session that logged a message-projection event can only be validated, restored or projected
by a process that has the same interpreter: the writer (which validates the append and
restores partitions), the surface projector, and any client that restores the session. They
all name interpreters the same way, ``"event/type=package.module:function,…"``, so one spec
string configures every service.
"""

from __future__ import annotations

import importlib

from dsh.projections import Interpreter
from servicekit.settings import ConfigError


def parse_interpreters(spec: str) -> dict[str, Interpreter]:
    """``"type=package.module:function,…"`` → {type: function}; a bad item is a ConfigError."""
    out: dict[str, Interpreter] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        event_type, sep, target = item.partition("=")
        module_name, colon, attr = target.partition(":")
        if not (sep and colon and event_type and module_name and attr):
            raise ConfigError(
                f"projection interpreter {item!r}: expected 'event/type=package.module:function'",
                code="BAD_INTERPRETER_SPEC",
            )
        try:
            out[event_type] = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"projection interpreter {item!r}: {type(exc).__name__}: {exc}",
                code="BAD_INTERPRETER_SPEC",
            ) from exc
    return out
