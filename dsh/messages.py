"""Deriving model messages from the surface, with an incremental cache.

While ``content_generation`` is unchanged the surface only grew at its end, so the cache visits
just the new tail. Messages are shared deeply immutable values; each call returns a fresh list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# These types project to nothing while their message has no content. The one definition: the
# projectors' read API applies it to the messages they keep in Redis.
DROP_WHEN_EMPTY = frozenset({"system/message", "assistant/message"})


def projects_to_nothing(type_: str, message: Mapping[str, Any]) -> bool:
    """True when a node of ``type_`` with this current message adds no model message."""
    return type_ in DROP_WHEN_EMPTY and not message["content"]


class MessageCache:
    __slots__ = ("_generation", "_messages", "_visited")

    def __init__(self) -> None:
        self._generation = -1
        self._visited = 0
        self._messages: list[Mapping[str, Any]] = []

    def derive(
        self,
        nodes: list[int],
        generation: int,
        current: Callable[[int], tuple[str, Mapping[str, Any]]],
    ) -> list[Mapping[str, Any]]:
        """``current(seq)`` is node ``seq``'s type and current message."""
        if generation != self._generation:
            self._generation = generation
            self._visited = 0
            self._messages = []
        if self._visited < len(nodes):
            out = self._messages
            for seq in nodes[self._visited :]:
                type_, message = current(seq)
                if type_ in DROP_WHEN_EMPTY and not message["content"]:
                    continue
                out.append(message)
            self._visited = len(nodes)
        return list(self._messages)
