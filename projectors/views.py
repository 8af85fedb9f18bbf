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

A read that will do at once is one round trip: the view, its meta hash and the rebuild mark in
one MULTI. While it waits, it polls only the applied seq, the block and the mark (one small
MULTI), backing off from 1 ms to 50 ms, and reads the view again when they say it will do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
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
from projectors.read_api import (
    AuditView,
    Reader,
    SurfaceView,
    TranscriptEntry,
    TranscriptView,
    json_object,
)
from projectors.transcript import entry_id

V = TypeVar("V", SurfaceView, TranscriptView, AuditView)

_FIRST_POLL_S = 0.001
_LAST_POLL_S = 0.05


def blocked_message(projection: str, session_id: str, blocked: dict[str, Any]) -> str:
    """The projector's blocked marker as a message: where, why, and the fix."""
    return (
        f"session {session_id} is blocked in the {projection} projection at seq "
        f"{blocked.get('seq')}: [{blocked.get('code')}] {blocked.get('message')}; fix the cause "
        "(e.g. register the missing interpreter in DSH_PROJECTOR_PROJECTIONS), then "
        f"`dsh replay {session_id}`"
    )


def follow(
    reader: Reader, session_id: str, after: int = -1, block_ms: int = 1000
) -> Iterator[TranscriptEntry | None]:
    """The transcript entries after seq ``after``, live, for ever (`dsh tail`, the HTTP API's
    stream). ``None`` after each ``block_ms`` without an entry, so a caller can stop or send
    a keep-alive; a blocked session ends it with ``SessionBlockedError`` (no entry would ever
    come), after every entry applied before the block. An unknown session is waited for, as
    its first append may be on its way."""
    key = reader.keys.session(session_id, "transcript")
    while True:
        # The marker first, the entries after it: read in this order, the entries include
        # every one applied before the block (none follows it), and they are all yielded
        # before the session is said to be blocked.
        blocked = reader.blocked("transcript", session_id)
        entries = reader.transcript(session_id, after)
        for entry in entries:
            yield entry
            after = entry.seq
        if blocked is not None:
            raise SessionBlockedError(blocked_message("transcript", session_id, blocked))
        if not entries:
            # Wakes at the next entry; the blocked marker is checked again after at most
            # block_ms (a block adds no entry).
            last = "0-0" if after < 0 else entry_id(after)
            reader.client.xread({key: last}, block=block_ms, count=1)
            yield None


@dataclass(frozen=True)
class _Meta:
    applied: int
    blocked: dict[str, Any] | None
    rebuilding: dict[str, Any] | None


def _blocking(steps: Generator[float, None, V]) -> V:
    """A read of :meth:`Views.waits`' steps that sleeps through its pauses."""
    while True:
        try:
            pause = next(steps)
        except StopIteration as done:
            view: V = done.value
            return view
        time.sleep(pause)


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
        return _blocking(
            self._steps("surface", session_id, at_least, timeout_s, self.reader.surface)
        )

    def transcript(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> TranscriptView:
        """What a human sees: every turn, compactions included."""
        return _blocking(
            self._steps("transcript", session_id, at_least, timeout_s, self.reader.transcript_view)
        )

    def audit(
        self, session_id: str, *, at_least: int | None = None, timeout_s: float | None = None
    ) -> AuditView:
        """Provenance: what each event cites, shadowed and was cited by."""
        return _blocking(self._steps("audit", session_id, at_least, timeout_s, self.reader.audit))

    def waits(
        self,
        projection: str,
        session_id: str,
        *,
        at_least: int | None = None,
        timeout_s: float | None = None,
    ) -> Generator[float, None, Any]:
        """The read of ``projection`` ("surface", "transcript" or "audit") as steps, for a
        caller that must not block while it waits (an event loop): each ``next`` does one
        poll of Redis and yields how long to pause before the next; the view is the
        generator's return value (``StopIteration.value``), and every error is raised as the
        blocking read raises it."""
        read = {
            "surface": self.reader.surface,
            "transcript": self.reader.transcript_view,
            "audit": self.reader.audit,
        }[projection]
        return self._steps(projection, session_id, at_least, timeout_s, read)

    def _steps(
        self,
        projection: str,
        session_id: str,
        at_least: int | None,
        timeout_s: float | None,
        read: Callable[[str], V],
    ) -> Generator[float, None, V]:
        wanted = 0 if at_least is None else at_least
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        pause = _FIRST_POLL_S
        # The view, its meta and the rebuild mark in one MULTI: when it will do, one round trip.
        view = read(session_id)
        state, current = _Meta(view.applied, view.blocked, view.rebuilding), True
        while True:
            if state.blocked is not None:
                view = view if current else read(session_id)
                message = blocked_message(projection, session_id, state.blocked)
                raise _with_view(SessionBlockedError(message), view)
            if state.applied < 0 and at_least is None:
                raise SessionUnknownError(
                    f"the {projection} read model has no events of session {session_id}: "
                    f"check the id, that `dsh project {projection}` runs (`dsh status`), and "
                    "DSH_REDIS_URL"
                )
            if state.rebuilding is None and state.applied >= wanted:
                if current:
                    return view
                view = read(session_id)
                state, current = _Meta(view.applied, view.blocked, view.rebuilding), True
                continue  # a rebuild may have set it back in between: checked again
            left = deadline - time.monotonic()
            if left <= 0:
                if state.rebuilding is not None:
                    view = view if current else read(session_id)
                    raise _with_view(_rebuilding(projection, session_id, state.rebuilding), view)
                raise ProjectionBehindError(
                    f"the {projection} read model of session {session_id} has applied seq "
                    f"{state.applied}, not yet {wanted}: is `dsh project {projection}` running "
                    "and keeping up (`dsh status`, dsh_projector_lag)?"
                )
            yield min(pause, left)
            pause = min(pause * 2, _LAST_POLL_S)
            state, current = self._meta(projection, session_id), False

    def _meta(self, projection: str, session_id: str) -> _Meta:
        """The applied seq, the block and the rebuild mark only: what a wait polls."""
        keys = self.reader.keys
        pipe = self.reader.client.pipeline(transaction=True)  # one slot: one round trip
        pipe.hmget(keys.meta(projection, session_id), ["applied", "blocked"])
        pipe.get(keys.rebuilding(projection, session_id))
        (applied, blocked), mark = pipe.execute()
        return _Meta(
            -1 if applied is None else int(applied),
            json_object(blocked),
            json_object(mark),
        )


def _rebuilding(projection: str, session_id: str, mark: dict[str, Any]) -> SessionRebuildingError:
    since = time.strftime("%H:%M:%S", time.localtime(mark.get("since", 0) / 1000))
    return SessionRebuildingError(
        f"the {projection} read model of session {session_id} is being rebuilt "
        f"({mark.get('cause')}, since {since}): what it holds may be stale; read again when "
        "the rebuild is done"
    )


def _with_view(
    exc: SessionBlockedError | SessionRebuildingError, view: Any
) -> SessionBlockedError | SessionRebuildingError:
    """The error, carrying the view as it stands (a caller may still show it)."""
    exc.view = view
    return exc
