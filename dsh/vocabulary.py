"""The v3 vocabulary: which event types exist and the shape of their ``data`` (contract §2).

These checks look at one event alone, so an event that passed them once never needs them again.
Extra keys are tolerated everywhere (newer writers may add fields); required ones are typed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dsh.errors import ValidationError

SURFACE_TYPES = frozenset({"system/message", "user/message", "assistant/message", "tool/result"})
# Types that may cite earlier events; assistant/message never may, not even with an empty list.
SOURCE_TYPES = frozenset({"system/message", "user/message", "tool/result"})
LOG_TYPES = frozenset(
    {
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "assistant/attempt",
        "tool/call",
        "request/header",
        "request/context",
        "session/end-seed",
    }
)
PLUGIN_TYPES = frozenset({"compaction/start", "compaction/end", "session/title"})
BUILTIN_PROJECTION_TYPES = frozenset({"image/offload"})
CORE_TYPES = SURFACE_TYPES | LOG_TYPES | PLUGIN_TYPES

TURN_END_KINDS = frozenset(
    {"completed", "aborted", "blocked", "error", "max-tokens", "interrupted"}
)
_SOURCE_FIELDS: dict[str, tuple[str, ...]] = {
    "user": (),
    "plugin": ("plugin",),
    "model": ("provider", "model"),
    "tool": ("callId",),
}


def _bad(where: str, what: str, code: str = "INVALID_DATA") -> ValidationError:
    # ``where`` names the event ('event 5 (tool/result)'); the helpers below pass it along.
    return ValidationError(f"{where}: {what}", code=code)


def _obj(v: object, where: str, path: str) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise _bad(where, f"{path} must be an object")
    return v


def _str(d: Mapping[str, Any], key: str, where: str, path: str) -> str:
    v = d.get(key)
    if type(v) is not str:
        raise _bad(where, f"{path}.{key} must be a string")
    return v


def _pos_int(d: Mapping[str, Any], key: str, where: str) -> int:
    v = d.get(key)
    if type(v) is not int or v < 1:
        raise _bad(where, f"data.{key} must be an int >= 1, got {v!r}")
    return v


def _list(d: Mapping[str, Any], key: str, where: str, path: str) -> list[Any]:
    v = d.get(key)
    if not isinstance(v, list):
        raise _bad(where, f"{path}.{key} must be a list")
    return v


def check_block(b: object, where: str, path: str, depth: int = 0) -> None:
    b = _obj(b, where, path)
    kind = b.get("type")
    if kind == "text" or kind == "reasoning":
        _str(b, "text", where, path)
    elif kind == "tool-call":
        for key in ("id", "name", "arguments"):
            _str(b, key, where, path)
    elif kind == "image":
        _str(b, "mediaType", where, path)
        _str(b, "data", where, path)
    elif kind == "tool-result":
        _str(b, "toolCallId", where, path)
        if type(b.get("isError")) is not bool:
            raise _bad(where, f"{path}.isError must be a bool")
        if depth > 0:
            raise _bad(where, f"{path}: a tool-result block cannot nest another")
        for i, inner in enumerate(_list(b, "content", where, path)):
            check_block(inner, where, f"{path}.content[{i}]", depth + 1)
    else:
        raise _bad(where, f"{path}.type {kind!r} is not a known content block")


def _blocks_ok(blocks: list[Any], depth: int) -> bool:
    """The same checks as :func:`check_block`, without building error paths (the hot path)."""
    for b in blocks:
        if not isinstance(b, dict):
            return False
        kind = b.get("type")
        if kind == "text" or kind == "reasoning":
            if b.get("text").__class__ is not str:
                return False
        elif kind == "tool-call":
            if not (
                b.get("id").__class__ is str
                and b.get("name").__class__ is str
                and b.get("arguments").__class__ is str
            ):
                return False
        elif kind == "image":
            if b.get("mediaType").__class__ is not str or b.get("data").__class__ is not str:
                return False
        elif kind == "tool-result":
            inner = b.get("content")
            if (
                depth
                or b.get("toolCallId").__class__ is not str
                or b.get("isError").__class__ is not bool
                or not isinstance(inner, list)
                or not _blocks_ok(inner, 1)
            ):
                return False
        else:
            return False
    return True


def check_message(
    m: object, where: str, role: str | None, path: str = "message"
) -> Mapping[str, Any]:
    m = _obj(m, where, path)
    _str(m, "id", where, path)
    got = _str(m, "role", where, path)
    if role is not None and got != role:
        raise _bad(where, f"{path}.role must be {role!r}, got {got!r}")
    elif got not in ("system", "user", "assistant"):
        raise _bad(where, f"{path}.role {got!r} is not a known role")
    content = _list(m, "content", where, path)
    if not _blocks_ok(content, 0):
        for i, b in enumerate(content):  # the slow path, to say exactly what is wrong
            check_block(b, where, f"{path}.content[{i}]")
        raise _bad(where, f"{path}.content is not a valid block list")  # pragma: no cover
    src = _obj(m.get("source"), where, f"{path}.source")
    kind = src.get("kind")
    # A str first: a frozen object or list is unhashable, and the lookup would raise TypeError.
    fields = _SOURCE_FIELDS.get(kind) if type(kind) is str else None
    if fields is None:
        raise _bad(where, f"{path}.source.kind {src.get('kind')!r} is not a known source")
    for key in fields:
        _str(src, key, where, f"{path}.source")
    return m


def _turn_step(d: Mapping[str, Any], where: str) -> None:
    _pos_int(d, "turn", where)
    _pos_int(d, "step", where)


def _system(d: Mapping[str, Any], t: str) -> None:
    _turn_step(d, t)
    m = check_message(d.get("message"), t, "system", "data.message")
    if m["source"]["kind"] != "plugin":
        raise _bad(t, "data.message.source must be a plugin source")


def _user(d: Mapping[str, Any], t: str) -> None:
    check_message(d, t, "user", "data")


def _assistant(d: Mapping[str, Any], t: str) -> None:
    _turn_step(d, t)
    m = check_message(d.get("message"), t, "assistant", "data.message")
    if m["source"]["kind"] != "model":
        raise _bad(t, "data.message.source must be a model source")
    _stream(d, t)
    if "usage" in d:
        _obj(d["usage"], t, "data.usage")
    if "interrupted" in d:
        if d["interrupted"] is not True:
            raise _bad(t, "data.interrupted must be true or absent")
        # Tool calls are dispatched after their message is logged, so an interrupted message
        # can only carry undispatched ones: the contract says it carries none.
        if any(b["type"] == "tool-call" for b in m["content"]):
            raise _bad(
                t,
                "an interrupted assistant message carries no tool-call blocks",
                "INTERRUPTED_WITH_TOOL_CALLS",
            )


def _stream(d: Mapping[str, Any], t: str) -> None:
    for i, delta in enumerate(_list(d, "stream", t, "data")):
        _obj(delta, t, f"data.stream[{i}]")


def _tool_result(d: Mapping[str, Any], t: str) -> None:
    _turn_step(d, t)
    m = check_message(d.get("message"), t, "user", "data.message")
    src = m["source"]
    if src["kind"] != "tool":
        raise _bad(t, "data.message.source must be a tool source")
    content = m["content"]
    if len(content) != 1 or content[0]["type"] != "tool-result":
        raise _bad(t, "data.message must hold exactly one tool-result block", "TOOL_RESULT_SHAPE")
    block = content[0]
    if block["toolCallId"] != src["callId"]:
        raise _bad(
            t,
            f"message has mismatched tool call ids (toolCallId {block['toolCallId']!r}, "
            f"source.callId {src['callId']!r})",
            "TOOL_RESULT_CALL_ID_MISMATCH",
        )
    if "error" in d:
        err = _obj(d["error"], t, "data.error")
        _str(err, "name", t, "data.error")
        _str(err, "code", t, "data.error")
        if "reason" in err and type(err["reason"]) is not str:
            raise _bad(t, "data.error.reason must be a string")
        if block["isError"] is not True:
            raise _bad(t, "data.error requires the block's isError: true", "TOOL_RESULT_ERROR_FLAG")


def _turn_start(d: Mapping[str, Any], t: str) -> None:
    _pos_int(d, "turn", t)


def _turn_end(d: Mapping[str, Any], t: str) -> None:
    _pos_int(d, "turn", t)
    reason = _obj(d.get("reason"), t, "data.reason")
    kind = reason.get("kind")
    if type(kind) is not str or kind not in TURN_END_KINDS:  # str first: see check_message
        raise _bad(t, f"data.reason.kind {reason.get('kind')!r} is not a known turn end reason")


def _attempt(d: Mapping[str, Any], t: str) -> None:
    _turn_step(d, t)
    _stream(d, t)


def _tool_call(d: Mapping[str, Any], t: str) -> None:
    _turn_step(d, t)
    for key in ("callId", "name", "arguments"):
        _str(d, key, t, "data")


def _request_header(d: Mapping[str, Any], t: str) -> None:
    header = _obj(d.get("header"), t, "data.header")
    if "config" not in header:
        raise _bad(t, "data.header.config is required")
    if "system" in header:
        raise _bad(t, "data.header.system is not allowed in v3 (the prompt is a system/message)")
    for key in ("tools", "adapterDefaults"):
        if key in header and not header[key]:
            raise _bad(t, f"data.header.{key} must be omitted rather than empty")
    if "reason" not in d:
        raise _bad(t, "data.reason is required")
    if "startsSeries" in d and type(d["startsSeries"]) is not bool:
        raise _bad(t, "data.startsSeries must be a bool")


def _request_context(d: Mapping[str, Any], t: str) -> None:
    _str(d, "provider", t, "data")
    _str(d, "model", t, "data")
    if "contextWindow" in d and type(d["contextWindow"]) is not int:
        raise _bad(t, "data.contextWindow must be an int")
    if "systemPromptUpdate" in d and d["systemPromptUpdate"] != "in-history":
        raise _bad(t, 'data.systemPromptUpdate must be "in-history" or absent')


def _end_seed(d: Mapping[str, Any], t: str) -> None:
    if "inherited" in d and d["inherited"] is not True:
        raise _bad(t, "data.inherited must be true or absent")


def _step(d: Mapping[str, Any], t: str) -> None:
    _turn_step(d, t)


_CHECKS: dict[str, Callable[[Mapping[str, Any], str], None]] = {
    "system/message": _system,
    "user/message": _user,
    "assistant/message": _assistant,
    "tool/result": _tool_result,
    "turn/start": _turn_start,
    "turn/end": _turn_end,
    "step/start": _step,
    "step/end": _step,
    "assistant/attempt": _attempt,
    "tool/call": _tool_call,
    "request/header": _request_header,
    "request/context": _request_context,
    "session/end-seed": _end_seed,
}


def check_data(type_: str, data: object, seq: int) -> None:
    """Raise ``ValidationError`` if ``data`` does not fit ``type_``; plugin types pass."""
    check = _CHECKS.get(type_)
    if check is None:
        return
    where = f"event {seq} ({type_})"
    if not isinstance(data, dict):
        raise _bad(where, "data must be an object")
    check(data, where)


def message_of(type_: str, data: Any) -> Mapping[str, Any]:
    """The model message a surface event carries (before any message projection)."""
    return data if type_ == "user/message" else data["message"]  # type: ignore[no-any-return]
