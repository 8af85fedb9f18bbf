"""The model surface: which events are the current nodes, and the replace-endpoint rules.

Plain appends are O(1): the node list grows and the position map gains one entry. A replace
costs O(range + nodes after it), because the later nodes' positions shift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dsh.errors import SurfaceError
from dsh.event import Replace


@dataclass(frozen=True, slots=True)
class ReplacePlan:
    start: int  # surface positions, inclusive
    end: int
    shadowed: tuple[int, ...]


class Surface:
    """Read view of a session's surface (``s.surface``)."""

    __slots__ = ("_nodes", "_pos", "_tuple", "content_generation", "replace_generation")

    def __init__(self) -> None:
        self._nodes: list[int] = []
        self._pos: dict[int, int] = {}
        self._tuple: tuple[int, ...] | None = ()
        self.replace_generation = 0
        self.content_generation = 0

    @property
    def nodes(self) -> tuple[int, ...]:
        t = self._tuple
        if t is None:
            t = self._tuple = tuple(self._nodes)
        return t

    def __repr__(self) -> str:
        return (
            f"Surface(nodes={self.nodes}, replace_generation={self.replace_generation}, "
            f"content_generation={self.content_generation})"
        )

    def plan_replace(self, op: Replace, seq: int) -> ReplacePlan:
        start_seq, end_seq = op.start_seq, op.end_seq
        if start_seq >= seq or end_seq >= seq:
            raise SurfaceError(
                f"surface replace at seq {seq}: startSeq and endSeq must reference earlier events",
                code="REPLACE_NOT_EARLIER",
            )
        start = self._pos.get(start_seq)
        if start is None:
            raise SurfaceError(
                f"surface replace at seq {seq}: start seq {start_seq} not found in surface",
                code="REPLACE_START_NOT_ON_SURFACE",
            )
        end = self._pos.get(end_seq)
        if end is None:
            raise SurfaceError(
                f"surface replace at seq {seq}: end seq {end_seq} not found in surface",
                code="REPLACE_END_NOT_ON_SURFACE",
            )
        if start > end:
            raise SurfaceError(
                f"surface replace at seq {seq}: start seq {start_seq} (index {start}) is after "
                f"end seq {end_seq} (index {end})",
                code="REPLACE_REVERSED",
            )
        return ReplacePlan(start, end, tuple(self._nodes[start : end + 1]))

    def node_at(self, index: int) -> int | None:
        nodes = self._nodes
        return nodes[index] if 0 <= index < len(nodes) else None

    def contains(self, seq: int) -> bool:
        return seq in self._pos

    def commit_append(self, seq: int) -> None:
        self._pos[seq] = len(self._nodes)
        self._nodes.append(seq)
        self._tuple = None

    def commit_replace(self, plan: ReplacePlan, seq: int) -> None:
        nodes, pos = self._nodes, self._pos
        for old in plan.shadowed:
            del pos[old]
        nodes[plan.start : plan.end + 1] = [seq]
        pos[seq] = plan.start
        if plan.end != plan.start:
            for i in range(plan.start + 1, len(nodes)):
                pos[nodes[i]] = i
        self._tuple = None
        self.replace_generation += 1
        self.content_generation += 1

    def positions(self) -> Mapping[int, int]:
        """Node seq -> surface position (live, read-only by convention)."""
        return self._pos

    def live_nodes(self) -> list[int]:
        """The internal node list (not a copy); callers must not mutate it."""
        return self._nodes
