"""Read-your-writes reads of the three read models, for any service.

Every append returns the seq it was committed at. A read with ``at_least=seq`` waits, up to its
timeout, until the projection has applied that seq, so a service reads its own writes (and, given
the seq, another service's). The answer is a view or a typed error, never a silently stale or
made-up view:

- ``SESSION_UNKNOWN``: nothing of that id was applied (without ``at_least``; with it, the wait
  ends in ``PROJECTION_BEHIND``, since the caller says the session exists);
- ``SESSION_BLOCKED``: the projector blocked the session; the view up to the block is on the
  error's ``view``;
- ``SESSION_REBUILDING``: a rebuild of the session is under way and did not end in time; the view
  as it stands, possibly stale, is on ``view``;
- ``PROJECTION_BEHIND``: the projection had not applied ``at_least`` when the time was up.

Waiting polls the session's meta hash (one small read), backing off from 1 ms to 50 ms; the
view itself is read once, in one MULTI, when the meta says it will do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis

from projectors.errors import (
    ProjectionBehindError,
    SessionBlockedError,
    SessionRebuildingError,
    SessionUnknownError,
)
from projectors.keys import Keys
from projectors.read_api import AuditView, Reader, SurfaceView, TranscriptEntry

V = TypeVar("V", SurfaceView, "TranscriptView", AuditView)

_FIRST_POLL_S = 0.001
_LAST_POLL_S = 0.05


@dataclass(frozen=True)
class TranscriptView:
    applied: int
    entries: list[TranscriptEntry]
    blocked: dict[str, Any] | None


def blocked_message(projection: str, session_id: str, blocked: dict[str, Any]) -> str:
    """The projector's blocked marker as a message: where, why, and the fix."""
    return (
        f"session {session_id} is blocked in the {projection} projection at seq "
        f"{blocked.get('seq')}: [{blocked.get('code')}] {blocked.get('message')}; fix the cause "
        "(e.g. register the missing interpreter in DSH_PROJECTOR_PROJECTIONS), then "
        f"`dsh replay {session_id}`"
    )


@dataclass(frozen=True)
class _Meta:
    applied: int
    blocked: dict[str, Any] | None
    rebuilding: dict[str, Any] | None


class Views:
    """The surface, transcript and audit of a session from Redis, each checked as the module
    says. ``timeout_s`` is the default bound of a wait (0: answer at once)."""

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        keys: Keys | None = None,
        *,
        timeout_s: float = 5.0,
    ) -> None:
        self.reader = Reader(client, keys or Keys())
        self.timeout_s = timeout_s

    def surface(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> SurfaceView:
        """What the model sees next (``Session.derive_messages()`` as ``.messages``)."""
        return self._read("surface", session_id, at_least, timeout_s, self.reader.surface)

    def transcript(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> TranscriptView:
        """What a human sees: every turn, compactions included."""
        return self._read("transcript", session_id, at_least, timeout_s, self._transcript)

    def audit(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> AuditView:
        """Provenance: what each event cites, shadowed and was cited by."""
        return self._read("audit", session_id, at_least, timeout_s, self.reader.audit)

    def _transcript(self, session_id: str) -> TranscriptView:
        # The applied seq first: entries read after it are at least as new, never fewer.
        meta = self._meta("transcript", session_id)
        entries = self.reader.transcript(session_id)
        return TranscriptView(meta.applied, entries, meta.blocked)

    def _read(
        self,
        projection: str,
        session_id: str,
        at_least: int | None,
        timeout_s: float | None,
        read: Callable[[str], V],
    ) -> V:
        wanted = 0 if at_least is None else at_least
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        pause = _FIRST_POLL_S
        while True:
            meta = self._meta(projection, session_id)
            if meta.blocked is not None:
                raise _with_view(
                    SessionBlockedError(blocked_message(projection, session_id, meta.blocked)),
                    read(session_id),
                )
            if meta.applied < 0 and at_least is None:
                raise SessionUnknownError(
                    f"the {projection} read model has no events of session {session_id}: "
                    f"check the id, that `dsh project {projection}` runs (`dsh status`), and "
                    "DSH_REDIS_URL"
                )
            if meta.rebuilding is None and meta.applied >= wanted:
                view = read(session_id)
                if view.applied >= wanted:  # else a rebuild set it back in between: wait on
                    return view
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._late(projection, session_id, wanted, meta, read)
            time.sleep(min(pause, left))
            pause = min(pause * 2, _LAST_POLL_S)

    def _late(
        self,
        projection: str,
        session_id: str,
        wanted: int,
        meta: _Meta,
        read: Callable[[str], V],
    ) -> Exception:
        if meta.rebuilding is not None:
            since = time.strftime(
                "%H:%M:%S", time.localtime(meta.rebuilding.get("since", 0) / 1000)
            )
            return _with_view(
                SessionRebuildingError(
                    f"the {projection} read model of session {session_id} is being rebuilt "
                    f"({meta.rebuilding.get('cause')}, since {since}): what it holds may be "
                    "stale; read again when the rebuild is done"
                ),
                read(session_id),
            )
        return ProjectionBehindError(
            f"the {projection} read model of session {session_id} has applied seq "
            f"{meta.applied}, not yet {wanted}: is `dsh project {projection}` running and "
            "keeping up (`dsh status`, dsh_projector_lag)?"
        )

    def _meta(self, projection: str, session_id: str) -> _Meta:
        applied, blocked = self.reader.client.hmget(
            self.reader.keys.meta(projection, session_id), ["applied", "blocked"]
        )
        return _Meta(
            -1 if applied is None else int(applied),
            None if blocked is None else dict(json.loads(blocked)),
            self.reader.rebuilding(projection, session_id),
        )


def _with_view(
    exc: SessionBlockedError | SessionRebuildingError, view: Any
) -> SessionBlockedError | SessionRebuildingError:
    """The error, carrying the view as it stands (a caller may still show it)."""
    exc.view = view
    return exc
