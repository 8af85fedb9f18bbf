"""Message-projection interpreters named in settings, and the reference ``image/offload`` one.

A session that logged a message-projection event can only be validated, restored or projected
by a process that has the same interpreter: the writer (which validates the append and
restores partitions), the surface projector, and any client that restores the session. They
all name interpreters the same way, ``"event/type=package.module:function,…"``, so one spec
string configures every service. This module lives in ``deploy/`` (the wiring every service
may import) because ``producers`` and ``projectors`` must not import each other.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from deploy.config import ConfigError
from dsh.projections import Interpreter

# What the local stack and `dsh demo` register: the spec services get by default there.
OFFLOAD_SPEC = "image/offload=deploy.interpreters:offload_images"


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


def offload_images(event: Any, ctx: Any) -> Mapping[int, Any]:
    """``image/offload {seqs, ref}``: the image blocks of the named nodes become a text pointer
    to the blob, so the model stops paying for the pixels while the log keeps them. Pure: the
    same event over the same messages always gives the same decision (restore replays it)."""
    out = {}
    for seq in event.data["seqs"]:
        message = ctx.messages[seq]
        content = [
            {"type": "text", "text": f"[image offloaded to {event.data['ref']}]"}
            if block["type"] == "image"
            else block
            for block in message["content"]
        ]
        out[seq] = {**message, "content": content}
    return out
