"""v2 → v3: the system prompt moves from request headers onto the surface.

v2 sent the prompt beside the history (``request/header.header.system``); v3 makes it a
``system/message`` so that "model-visible means logged" also holds for the prompt. The first
one goes right after the first ``step/start`` (empty until a prompt is known), so it is surface
node 0 and the node-0 rule protects it. A later header whose prompt differs gets a
``system/message`` just before it — the request already saw the new prompt — replacing the
current head and citing it.

Choices the contract leaves open:

- ``header.system`` may be a string (one text block; ``""`` is no content) or a list of content
  blocks. Anything else, ``null`` included, has no stated meaning: FormatError. A header without
  the key leaves the prompt as it was.
- A prompt seen before the first ``step/start`` is the initial prompt. A second, different
  one there, or any prompt in a log that never opens a step, has no place a v3 system message
  may stand: FormatError, like a prompt change outside an open step.
- Empty ``tools``/``adapterDefaults`` means ``[]``, ``{}`` or ``null``; each is dropped.
- Inserted messages are ``{"kind": "plugin", "plugin": "migration"}`` with id
  ``migration-system-<v3 seq>`` and take the time of the event they stand next to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsh.formats.log import Entry, data_object, renumber, untranslatable
from dsh.formats.wire import is_int

VERSION = 2
MIGRATION_SOURCE = {"kind": "plugin", "plugin": "migration"}
SURFACE_TYPES = frozenset({"system/message", "user/message", "assistant/message", "tool/result"})
# "No tools" has one v3 spelling, the absent key, whichever empty value v2 wrote.
_EMPTY: tuple[None, list[Any], dict[str, Any]] = (None, [], {})


def _prompt(entry: Entry, value: Any) -> list[Any]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    if isinstance(value, list):
        return value
    raise untranslatable(
        entry, VERSION, f"header.system must be a string or a list of blocks, got {value!r}"
    )


def _system_message(
    seq: int, time: Any, turn_step: tuple[int, int], content: list[Any], head: int | None
) -> Entry:
    turn, step = turn_step
    message = {
        "id": f"migration-system-{seq}",
        "role": "system",
        "content": content,
        "source": dict(MIGRATION_SOURCE),
    }
    event: dict[str, Any] = {
        "type": "system/message",
        "seq": seq,
        "time": time,
        "data": {"turn": turn, "step": step, "message": message},
    }
    if head is None:
        event["surfaceOp"] = "append"
    else:
        event["surfaceOp"] = {"op": "replace", "startSeq": head, "endSeq": head}
        event["sourceEventSeqs"] = [head]
    return Entry(event, None, inserted=True)


def _rename_replace(event: dict[str, Any]) -> dict[str, Any]:
    op = event.get("surfaceOp")
    if not (isinstance(op, dict) and op.get("op") == "replace"):
        return event
    renamed = {{"start": "startSeq", "end": "endSeq"}.get(k, k): v for k, v in op.items()}
    return {**event, "surfaceOp": renamed}


def _clean_header(entry: Entry) -> Entry:
    data = dict(data_object(entry, VERSION))
    header = data.get("header")
    if not isinstance(header, dict):
        raise untranslatable(entry, VERSION, "request/header data.header must be an object")
    data["header"] = {
        k: v
        for k, v in header.items()
        if k != "system" and not (k in ("tools", "adapterDefaults") and v in _EMPTY)
    }
    return Entry({**entry.event, "data": data}, entry.line, entry.inserted)


def migrate(entries: Sequence[Entry]) -> list[Entry]:
    out: list[Entry] = []
    prompt: list[Any] | None = None
    prompt_line: Entry | None = None
    head: int | None = None  # v3 seq of the system/message now at surface node 0
    started = False
    open_step: tuple[int, int] | None = None

    for entry in entries:
        event, kind = entry.event, entry.event["type"]
        if kind in SURFACE_TYPES and not started and event.get("ignorable") is not True:
            raise untranslatable(
                entry,
                VERSION,
                f"{kind} before the first step/start; the system prompt must become surface node 0",
            )
        if kind == "request/header":
            header = data_object(entry, VERSION).get("header")
            if isinstance(header, dict) and "system" in header:
                new = _prompt(entry, header["system"])
                if not started and prompt is None:
                    prompt, prompt_line = new, entry
                elif new != prompt:
                    if open_step is None:
                        raise untranslatable(
                            entry, VERSION, "the system prompt changes outside an open step"
                        )
                    out.append(_system_message(len(out), event.get("time"), open_step, new, head))
                    head, prompt = len(out) - 1, new
            entry = _clean_header(entry)
        elif kind in ("turn/start", "turn/end", "step/end"):
            open_step = None
        out.append(Entry(_rename_replace(entry.event), entry.line, entry.inserted))
        if kind == "step/start":
            data = data_object(entry, VERSION)
            turn, step = data.get("turn"), data.get("step")
            if not (is_int(turn) and is_int(step)):
                raise untranslatable(entry, VERSION, "step/start needs int turn and step")
            open_step = (turn, step)
            if not started:
                started = True
                prompt = prompt or []
                out.append(_system_message(len(out), event.get("time"), open_step, prompt, None))
                head = len(out) - 1
    if prompt_line is not None and not started:
        raise untranslatable(
            prompt_line,
            VERSION,
            "a system prompt is set, but no step ever opens to carry it",
        )
    return renumber(out, VERSION, ("startSeq", "endSeq"))
