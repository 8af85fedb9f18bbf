"""The tool-result rewrite rule: a ``tool/result`` replace rewrites one result's content only.

It must replace exactly one current node, that node must be a ``tool/result``, and everything
but the ``content`` inside the single tool-result block must stay equal as JSON, types included
(ids, isError, turn, step, error, meta...: ``true`` does not become ``1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.errors import SurfaceError
from dsh.json_snapshot import same_json
from dsh.surface import ReplacePlan


def _without_result_content(data: Mapping[str, Any]) -> dict[str, Any]:
    message = data["message"]
    block = message["content"][0]
    stripped_block = {k: v for k, v in block.items() if k != "content"}
    stripped_message = {**message, "content": [stripped_block]}
    return {**data, "message": stripped_message}


def check_tool_result_rewrite(
    seq: int, data: Mapping[str, Any], plan: ReplacePlan, target_type: str, target_data: Any
) -> None:
    if plan.start != plan.end:
        raise SurfaceError(
            f"surface replace at seq {seq}: tool/result surface replacement must rewrite exactly "
            f"one current node (range covers {plan.end - plan.start + 1})",
            code="TOOL_REWRITE_NOT_SINGLE",
        )
    if target_type != "tool/result":
        raise SurfaceError(
            f"surface replace at seq {seq}: tool/result surface replacement must target a "
            f"current tool/result (seq {plan.shadowed[0]} is {target_type})",
            code="TOOL_REWRITE_TARGET",
        )
    # JSON-strictly: with ``!=``, meta {"x": true} could become {"x": 1} (True == 1 == 1.0).
    if not same_json(_without_result_content(data), _without_result_content(target_data)):
        raise SurfaceError(
            f"surface replace at seq {seq}: tool/result surface replacement may change only "
            f"content (of the result block of seq {plan.shadowed[0]})",
            code="TOOL_REWRITE_CHANGED",
        )
