"""The node-0 rule: a system prompt at surface position 0 can only be swapped for another one.

When node 0 is a ``system/message``, a replace whose range starts at position 0 must be a
``system/message`` replacing exactly that one node. Later system nodes have no protection.
"""

from __future__ import annotations

from dsh.errors import SurfaceError
from dsh.surface import ReplacePlan


def check_node_zero(type_: str, seq: int, plan: ReplacePlan, node0_type: str | None) -> None:
    if plan.start != 0 or node0_type != "system/message":
        return
    if type_ != "system/message":
        raise SurfaceError(
            f"surface replace at seq {seq}: node 0 is the system prompt; only a system/message "
            f"may replace it (got {type_})",
            code="NODE0_REPLACEMENT_NOT_SYSTEM",
        )
    if plan.end != 0:
        raise SurfaceError(
            f"surface replace at seq {seq}: a replacement of the system prompt at node 0 must "
            f"cover exactly that node (range covers {plan.end + 1} nodes)",
            code="NODE0_RANGE_TOO_WIDE",
        )
