"""What ``SessionClient`` reads the read models through: any object with these three reads,
such as ``projectors.views.Views`` (kept behind this protocol because producers and projectors
are separate services that share only the kit and the core)."""

from __future__ import annotations

from typing import Any, Protocol


class ReadModels(Protocol):
    """Each read waits, up to ``timeout_s``, until the projection has applied ``at_least``;
    it raises a typed error for a session that is unknown, blocked, rebuilding or behind."""

    def surface(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> Any: ...

    def transcript(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> Any: ...

    def audit(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> Any: ...
