"""The mapping between the OpenAI Agents SDK's input items and dsh events, one item per
event so items round-trip (the ``Session`` adapter on top is ``producers.agents_session``):

- ``{"role": "user", ...}`` → ``user/message`` (``input_text`` ↔ text blocks, ``input_image``
  with a ``data:`` URL ↔ image blocks). A user message after model output ends the open turn
  (``step/end``, ``turn/end {completed}``) and starts the next (``turn/start``).
- ``{"role": "system" | "developer", ...}`` → ``system/message`` (plugin source
  ``openai-agents`` / ``openai-agents:developer``, so the role comes back).
- assistant ``message`` → ``assistant/message`` (``output_text`` and ``refusal`` ↔ text);
  ``function_call`` → ``assistant/message`` with one ``tool-call`` block plus the log-only
  ``tool/call``; ``function_call_output`` → ``tool/result`` citing that ``tool/call``;
  ``reasoning`` → ``assistant/message`` with reasoning blocks (its summary text). Model output
  after tool results starts a new step (a new model response).
- Anything else (hosted tool calls, file inputs, URL images, …) is refused with
  ``UNSUPPORTED_ITEM``: model-visible means logged, and there is no faithful event for it.

Each surface event also carries the SDK item exactly as it was added, in ``meta`` (the data's
``meta`` field; for ``user/message``, whose data is the message, the message's), under
``{"openai-agents": {"item": …}}``. The vocabulary keeps extra fields (``dsh.vocabulary``) and
the codec encodes them losslessly, so the message stays valid vocabulary for every projection
while the SDK gets back the very item it added. Back from the surface (:func:`surface_items`),
a node whose message is still the one logged gives its original item; a node some other
producer wrote, or whose message a replace or message projection changed, is mapped back from
its message, where reasoning blocks give no item (the SDK could not replay them without the
provider's encrypted content). A ``tool/result`` rewrite keeps the original item in ``meta``
(it may change only the result's content): the item comes back with the rewritten output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import dsh
from dsh.errors import ValidationError, register_error
from producers.agents_position import Position

PLUGIN = "openai-agents"
META_KEY = "meta"  # where a surface event keeps the SDK item it came from: meta[PLUGIN]["item"]
_SDK_ID_PREFIXES = ("msg_", "fc_", "rs_")  # ids the Responses API gave; ours are dropped


@register_error
class UnsupportedItemError(ValidationError):
    """An SDK item the vocabulary cannot hold faithfully; nothing was appended."""

    default_code = "UNSUPPORTED_ITEM"


class Planner:
    """Turns items into appends (``drafts``): each is validated by the local copy first, which
    gives its seq; the adapter sends them pipelined with that ``expected_seq``."""

    def __init__(
        self, local: dsh.Session, source: Mapping[str, str], position: Position | None = None
    ) -> None:
        """``position``: where ``local`` stands (folded up to its end; the planner folds a copy
        of it on), else folded from the whole log."""
        self.local = local
        self.source = dict(source)
        self.drafts: list[tuple[str, Any, Any, Any, int]] = []
        if position is None or position.seen != len(local):
            position = Position.of(local)
        else:
            position = position.copy()
        self.position = position

    # The position's fields the item mapping reads, by the names it reads them.
    @property
    def turn(self) -> int:
        return self.position.turn

    @property
    def step(self) -> int:
        return self.position.step

    @property
    def calls(self) -> dict[str, int]:
        return self.position.calls

    @property
    def has_output(self) -> bool:
        return self.position.has_output

    @property
    def has_results(self) -> bool:
        return self.position.has_results

    def append(self, type_: str, data: Any, op: Any = None, sources: Any = None) -> dsh.Event:
        ev = self.local.append(type_, data, surface_op=op, source_event_seqs=sources)
        self.drafts.append((type_, data, op, sources, ev.seq))
        self.position.fold(ev)
        return ev

    # -- turn and step structure ----------------------------------------------------------

    def open_turn(self) -> None:
        if not self.turn:
            self.append("turn/start", {"turn": self.position.last_turn + 1})

    def open_step(self) -> None:
        self.open_turn()
        if not self.step:
            self.append("step/start", {"turn": self.turn, "step": self.position.last_step + 1})

    def close_turn(self) -> None:
        if self.step:
            self.append("step/end", {"turn": self.turn, "step": self.step})
        if self.turn:
            self.append("turn/end", {"turn": self.turn, "reason": {"kind": "completed"}})

    def model_step(self, call_id: str | None = None) -> None:
        """Model output goes in a step; output after tool results is the next response, and so
        is a call the open step already dispatched (added again after ``pop_item``): a step
        dispatches a call once."""
        if self.step and (self.has_results or call_id in self.calls):
            self.append("step/end", {"turn": self.turn, "step": self.step})
        self.open_step()  # the assistant/message that follows marks the turn as having output

    def system_data(self, message_id: str, content: list[Any], plugin: str = PLUGIN) -> Any:
        message = {
            "id": message_id,
            "role": "system",
            "content": content,
            "source": {"kind": "plugin", "plugin": plugin},
        }
        return {"turn": self.turn, "step": self.step, "message": message}

    # -- one item -------------------------------------------------------------------------

    def item(self, item: Mapping[str, Any]) -> None:
        """Plan the events of one SDK item; one of a shape the SDK would not send (a field
        missing, of the wrong type) is an ``UnsupportedItemError``, as an unknown one is."""
        if not isinstance(item, Mapping):
            raise UnsupportedItemError(f"an item is a JSON object, not {type(item).__name__}")
        try:
            self._item(item)
        except (KeyError, AttributeError, TypeError) as exc:
            raise UnsupportedItemError(
                f"item of type {item.get('type', 'message')!r} is malformed: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def _item(self, item: Mapping[str, Any]) -> None:
        kind = item.get("type", "message")
        role = item.get("role")
        next_id = f"dsh-{len(self.local)}"
        meta = {PLUGIN: {"item": _plain(item)}}
        content = item_content(item)  # refuses an item with no faithful event
        if kind == "message" and role == "user":
            if self.has_output:
                self.close_turn()
            self.open_turn()
            message = {
                "id": next_id,
                "role": "user",
                "content": content,
                "source": {"kind": "user"},
                META_KEY: meta,
            }
            self.append("user/message", message, "append")
        elif kind == "message" and role in ("system", "developer"):
            self.open_step()
            plugin = PLUGIN if role == "system" else f"{PLUGIN}:developer"
            data = {**self.system_data(next_id, content, plugin), META_KEY: meta}
            self.append("system/message", data, "append")
        elif kind == "function_call":
            self.model_step(item["call_id"])
            self._assistant(item.get("id") or next_id, content, meta)
            self.append(
                "tool/call",
                {
                    "turn": self.turn,
                    "step": self.step,
                    "callId": item["call_id"],
                    "name": item["name"],
                    "arguments": item.get("arguments", ""),
                },
            )
        elif kind == "function_call_output":
            call_id = item["call_id"]
            if call_id not in self.calls:
                raise UnsupportedItemError(
                    f"function_call_output for call {call_id!r}, which no function_call of the "
                    "open step requested"
                )
            if self.local.invariants and call_id in self.local.turns.answered:
                # A call has one result in the log, and a popped one stays there: the result
                # cannot be logged again without logging the call again, which no model did.
                raise UnsupportedItemError(
                    f"function_call_output for call {call_id!r}, which already has a result in "
                    "the log (a popped result stays there): a call's result can be added again "
                    "only with the call, after popping both"
                )
            message = {
                "id": f"dsh-r-{len(self.local)}",
                "role": "user",
                "content": content,
                "source": {"kind": "tool", "callId": call_id},
            }
            data = {"turn": self.turn, "step": self.step, "message": message, META_KEY: meta}
            self.append("tool/result", data, "append", [self.calls[call_id]])
        else:  # an assistant message or reasoning: model output
            self.model_step()
            self._assistant(item.get("id") or next_id, content, meta)

    def _assistant(self, message_id: str, content: list[Any], meta: Any) -> None:
        message = {"id": message_id, "role": "assistant", "content": content, "source": self.source}
        data = {
            "turn": self.turn,
            "step": self.step,
            "message": message,
            "stream": [],
            META_KEY: meta,
        }
        self.append("assistant/message", data, "append")


def node_items(s: dsh.Session) -> list[tuple[int, list[dict[str, Any]]]]:
    """Each surface node with the SDK items it gives (none where it projects to nothing)."""
    messages = iter(s.derive_messages())
    out: list[tuple[int, list[dict[str, Any]]]] = []
    for seq in s.surface.nodes:
        ev = s.event(seq)
        logged = ev.data if ev.type == "user/message" else ev.data.get("message")
        if ev.type in ("system/message", "assistant/message") and not logged["content"]:
            out.append((seq, []))  # projects to no message
            continue
        message = next(messages)
        out.append((seq, _items_of(ev, logged, message)))
    return out


def surface_items(s: dsh.Session) -> list[dict[str, Any]]:
    """What the model is sent next, as the SDK's input items."""
    return [item for _, items in node_items(s) for item in items]


def _items_of(ev: dsh.Event, logged: Any, message: Any) -> list[dict[str, Any]]:
    if message == logged:
        return [_plain(item) for item in logged_items(ev)]
    return message_items(message)


def logged_items(ev: dsh.Event) -> list[Any]:
    """The SDK items of surface event ``ev`` while its message is the one logged (no message
    projection changed it), as :func:`node_items` gives them but shared, not copied: the
    caller serialises them (``producers.agents_surface``)."""
    logged = ev.data if ev.type == "user/message" else ev.data.get("message")
    if ev.type in ("system/message", "assistant/message") and not logged["content"]:
        return []
    original = ev.data.get(META_KEY, {}).get(PLUGIN, {}).get("item")
    if not isinstance(original, Mapping):
        return message_items(logged)
    if _content_of(original) == logged["content"]:
        return [original]
    # The event carries an item its message no longer says: a tool/result rewrite (redaction,
    # truncation by another service) may change only the result's content, so its meta still
    # holds the item as first added. The model must get the rewritten output, not the stored
    # one; the item keeps its other fields.
    items = message_items(logged)
    if ev.type == "tool/result" and len(items) == 1:
        return [{**original, "output": items[0]["output"]}]
    return items


def _content_of(item: Mapping[str, Any]) -> Any:
    """The message content :class:`Planner` logs for ``item`` (None if it would refuse it)."""
    try:
        return item_content(item)
    except (ValidationError, KeyError, AttributeError, TypeError):
        return None


def _plain(value: Any) -> Any:
    """A plain, mutable JSON copy (the SDK may change the items it is given)."""
    return json.loads(json.dumps(value))


# -- content and items ------------------------------------------------------------------------


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def item_content(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The content of the message an SDK item is logged as."""
    kind = item.get("type", "message")
    role = item.get("role")
    if kind == "message" and role in ("user", "system", "developer"):
        return _input_content(item.get("content"))
    if kind == "message" and role == "assistant":
        return _output_content(item.get("content"))
    if kind == "function_call":
        arguments = item.get("arguments", "")
        return [
            {
                "type": "tool-call",
                "id": item["call_id"],
                "name": item["name"],
                "arguments": arguments,
            }
        ]
    if kind == "function_call_output":
        output = item.get("output", "")
        content = [_text(output)] if isinstance(output, str) else _input_content(output)
        return [
            {
                "type": "tool-result",
                "toolCallId": item["call_id"],
                "content": content,
                "isError": False,
            }
        ]
    if kind == "reasoning":
        summary = [s.get("text", "") for s in item.get("summary") or ()]
        # At least one block: a message with no content projects to nothing, and the item
        # would not come back.
        return [{"type": "reasoning", "text": t} for t in summary or [""]]
    raise UnsupportedItemError(
        f"item type {kind!r} (role {role!r}) has no faithful event in the vocabulary"
    )


def _input_content(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text(content)]
    out = []
    for part in content or ():
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            out.append(_text(part.get("text", "")))
        elif kind == "input_image" and str(part.get("image_url", "")).startswith("data:"):
            header, _, data = part["image_url"].partition(",")
            media_type = header[len("data:") :].split(";", 1)[0]
            out.append({"type": "image", "mediaType": media_type, "data": data})
        else:
            raise UnsupportedItemError(f"content part {kind!r} has no block in the vocabulary")
    return out


def _output_content(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text(content)]
    out = []
    for part in content or ():
        kind = part.get("type")
        if kind in ("output_text", "input_text", "text"):
            out.append(_text(part.get("text", "")))
        elif kind == "refusal":
            out.append(_text(part.get("refusal", "")))
        else:
            raise UnsupportedItemError(f"content part {kind!r} has no block in the vocabulary")
    return out


def _input_parts(blocks: Sequence[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if b["type"] == "text":
            parts.append({"type": "input_text", "text": b["text"]})
        elif b["type"] == "image":
            url = f"data:{b['mediaType']};base64,{b['data']}"
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return parts


def message_items(message: Any) -> list[dict[str, Any]]:
    """A surface message as the SDK's input items (what the model is sent next)."""
    role, content, source = message["role"], message["content"], message["source"]
    if role == "system":
        plugin = source.get("plugin", "")
        sdk_role = "developer" if plugin == f"{PLUGIN}:developer" else "system"
        text = "\n".join(b["text"] for b in content if b["type"] == "text")
        return [{"role": sdk_role, "content": text}] if text else []
    if role == "user":
        results = [b for b in content if b["type"] == "tool-result"]
        if results:
            out = []
            for r in results:
                inner = r["content"]
                output: Any = (
                    inner[0]["text"]
                    if len(inner) == 1 and inner[0]["type"] == "text"
                    else _input_parts(inner)
                )
                out.append(
                    {"type": "function_call_output", "call_id": r["toolCallId"], "output": output}
                )
            return out
        return [{"role": "user", "content": _input_parts(content)}]
    # assistant: text in one output message, each tool call its own item; reasoning is not
    # sent back (see the module docstring).
    items: list[dict[str, Any]] = []
    texts = [b["text"] for b in content if b["type"] == "text"]
    sdk_id = message["id"] if str(message["id"]).startswith(_SDK_ID_PREFIXES) else None
    if texts:
        parts = [{"type": "output_text", "text": t, "annotations": []} for t in texts]
        if sdk_id is not None and sdk_id.startswith("msg_"):
            items.append(
                {
                    "type": "message",
                    "id": sdk_id,
                    "role": "assistant",
                    "status": "completed",
                    "content": parts,
                }
            )
        else:
            items.append({"role": "assistant", "content": "".join(texts)})
    for b in content:
        if b["type"] == "tool-call":
            item = {
                "type": "function_call",
                "call_id": b["id"],
                "name": b["name"],
                "arguments": b["arguments"],
            }
            if sdk_id is not None and sdk_id.startswith("fc_"):
                item["id"] = sdk_id
            items.append(item)
    return items
