"""The reference ``image/offload`` interpreter: image blocks become a pointer to their blob."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What the local stack and `dsh demo` register: the spec services get by default there.
OFFLOAD_SPEC = "image/offload=interpreters.image_offload:offload_images"


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
