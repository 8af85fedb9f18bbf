"""Message projections: logged events whose registered interpreter rewrites current messages.

An interpreter is pure: ``interpreter(event, ctx) -> Mapping[seq, message]``. Its decision is
validated before the event is accepted, and the event is replayable because the same
interpreter gives the same decision on restore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from dsh.errors import ProjectionError, SessionError
from dsh.event import Event
from dsh.json_snapshot import freeze
from dsh.vocabulary import CORE_TYPES, check_message


class ProjectionContext(Protocol):
    @property
    def nodes(self) -> tuple[int, ...]: ...

    @property
    def messages(self) -> Mapping[int, Mapping[str, Any]]: ...


Interpreter = Callable[[Event, ProjectionContext], Mapping[int, Any]]


class CurrentMessages(Mapping[int, Mapping[str, Any]]):
    """``ctx.messages``: a live, read-only view (no O(n) copy per projection event)."""

    __slots__ = ("_lookup", "_nodes", "_positions")

    def __init__(
        self,
        nodes: tuple[int, ...],
        positions: Mapping[int, int],
        lookup: Callable[[int], Mapping[str, Any]],
    ) -> None:
        self._nodes = nodes
        self._positions = positions
        self._lookup = lookup

    def __getitem__(self, seq: int) -> Mapping[str, Any]:
        if seq not in self._positions:
            raise KeyError(seq)
        return self._lookup(seq)

    def __iter__(self) -> Iterator[int]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, seq: object) -> bool:
        return seq in self._positions


class Context:
    __slots__ = ("messages", "nodes")

    def __init__(
        self,
        nodes: tuple[int, ...],
        positions: Mapping[int, int],
        lookup: Callable[[int], Mapping[str, Any]],
    ) -> None:
        self.nodes = nodes
        self.messages = CurrentMessages(nodes, positions, lookup)


def check_registrable(event_type: str) -> None:
    if event_type in CORE_TYPES:
        raise ProjectionError(
            f"{event_type} is a core event type and cannot be a message projection",
            code="PROJECTION_TYPE_RESERVED",
        )


def run_interpreter(
    interpreter: Interpreter,
    ev: Event,
    nodes: tuple[int, ...],
    node_positions: Mapping[int, int],
    lookup: Callable[[int], Mapping[str, Any]],
) -> dict[int, Any]:
    """Run and validate one decision; returns frozen messages keyed by current node seq."""
    try:
        decision = interpreter(ev, Context(nodes, node_positions, lookup))
    except SessionError as exc:
        raise ProjectionError(
            f"event {ev.seq} ({ev.type}): interpreter rejected it: {exc.message}",
            code="PROJECTION_FAILED",
        ) from exc
    except Exception as exc:
        raise ProjectionError(
            f"event {ev.seq} ({ev.type}): interpreter raised {type(exc).__name__}: {exc}",
            code="PROJECTION_FAILED",
        ) from exc
    if not isinstance(decision, Mapping):
        raise ProjectionError(
            f"event {ev.seq} ({ev.type}): interpreter must return a mapping of seq to message",
            code="PROJECTION_INVALID",
        )
    out: dict[int, Any] = {}
    for seq, message in decision.items():
        if type(seq) is not int or seq not in node_positions:
            raise ProjectionError(
                f"event {ev.seq} ({ev.type}): interpreter returned seq {seq!r}, which is not a "
                "current surface node",
                code="PROJECTION_NOT_A_NODE",
            )
        try:
            frozen = freeze(message, f"message[{seq}]")
            check_message(frozen, f"event {ev.seq} ({ev.type})", None, f"message[{seq}]")
        except SessionError as exc:
            raise ProjectionError(
                f"event {ev.seq} ({ev.type}): interpreter returned an invalid message for seq "
                f"{seq}: {exc.message}",
                code="PROJECTION_INVALID",
            ) from exc
        out[seq] = frozen
    return out
