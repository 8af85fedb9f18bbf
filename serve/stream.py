"""``GET /v1/sessions/{session_id}/transcript/stream``: the transcript live, as Server-Sent
Events, from the session's feed (:mod:`serve.feeds`: one follow, the way `dsh tail` follows,
shared by every stream of the session).

Each entry is one event with ``id:`` its seq, so a client that reconnects with
``Last-Event-ID`` (browsers' ``EventSource`` does by itself) gets the entries after it first,
then the new ones: nothing missed, nothing twice. A blocked session ends the stream with an
``event: blocked`` whose data is the problem. An SSE comment goes out each idle second, so
proxies keep the connection open; the stream ends at the next one once the server is stopping.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncGenerator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from projectors.errors import SessionBlockedError
from projectors.read_api import TranscriptEntry
from projectors.views import blocked_message
from serve.access import SessionAccess
from serve.appends import ERRORS
from serve.feeds import Feeds
from serve.limits import MAX_SEQ, parse_last_event_id
from serve.metrics import OPEN_STREAMS
from serve.problems import Problem, problem_type

router = APIRouter(prefix="/v1")


def _frame(entry: TranscriptEntry) -> str:
    data = json.dumps(entry.event | {"kind": entry.kind}, separators=(",", ":"))
    return f"id: {entry.seq}\nevent: entry\ndata: {data}\n\n"


async def events(
    feeds: Feeds, session_id: str, after: int, stopping: threading.Event
) -> AsyncGenerator[str, None]:
    reader = feeds.reader
    async with feeds.joined(session_id) as subscriber:
        try:
            # After joining: an entry the history misses is one the feed brings.
            blocked = await run_in_threadpool(reader.blocked, "transcript", session_id)
            if blocked is not None:
                raise SessionBlockedError(blocked_message("transcript", session_id, blocked))
            for entry in await run_in_threadpool(reader.transcript, session_id, after):
                yield _frame(entry)
                after = entry.seq
            # Until the server stops (serve.draining): the stream ends then, within an idle
            # second, and its client resumes with Last-Event-ID elsewhere.
            while not subscriber.overflowed and not stopping.is_set():
                item = await subscriber.queue.get()
                if item is None:
                    yield ": idle\n\n"
                elif isinstance(item, BaseException):
                    if isinstance(item, SessionBlockedError):
                        raise item
                    return  # Redis failed (the feed logged it): the client resumes
                elif item.seq > after:
                    yield _frame(item)
                    after = item.seq
        except SessionBlockedError as exc:
            problem = {
                "type": problem_type(exc.code),
                "title": "Conflict",
                "status": 409,
                "detail": exc.message,
                "code": exc.code,
                "session_id": session_id,
            }
            yield f"event: blocked\ndata: {json.dumps(problem)}\n\n"


class _Stream(StreamingResponse):
    """Leaves the session's feed and gives the stream's slot back when the response ends,
    however it ends (the entries stopped, the client went away, the server stops): not when
    the collector gets to the generator, which a reference cycle can put off indefinitely.
    The slot comes back once the feed is left and, for its last stream, has ended
    (``Feeds.settled``): a feed's Redis connection is counted in the slots. Here, not in the
    generator: a client that goes away cancels that, and the wait with it."""

    def __init__(
        self,
        slot: threading.BoundedSemaphore,
        feeds: Feeds,
        session_id: str,
        frames: AsyncGenerator[str, None],
        **kw: Any,
    ) -> None:
        super().__init__(frames, **kw)
        self.slot, self.feeds, self.session_id, self.frames = slot, feeds, session_id, frames

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                with contextlib.suppress(RuntimeError):  # still running: it ends where it runs
                    await self.frames.aclose()
                await self.feeds.settled(self.session_id)
            finally:
                self.slot.release()
                OPEN_STREAMS.dec()


@router.get(
    "/sessions/{session_id}/transcript/stream",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "entries as SSE, id = seq"},
        **{s: ERRORS[s] for s in (401, 403, 422, 503)},
    },
    response_class=StreamingResponse,
    summary="Follow the transcript live (Server-Sent Events, resumable)",
)
async def stream(
    access: SessionAccess,
    last_event_id: Annotated[
        str | None, Header(description="resume after this seq (what EventSource sends)")
    ] = None,
    after: Annotated[
        int, Query(ge=-1, le=MAX_SEQ, description="start after this seq (-1: from the start)")
    ] = -1,
) -> StreamingResponse:
    if last_event_id is not None:
        after = parse_last_event_id(last_event_id)
    slot = access.clients.streams
    if not slot.acquire(blocking=False):
        raise Problem(
            503,
            "TOO_MANY_STREAMS",
            f"{access.clients.settings.max_streams} streams are open (DSH_SERVE_MAX_STREAMS)",
            **{"Retry-After": str(access.clients.settings.retry_after_s)},
        )
    OPEN_STREAMS.inc()  # from here the response gives the slot back, and this with it
    feeds = access.clients.feeds
    return _Stream(
        slot,
        feeds,
        access.session_id,
        events(feeds, access.session_id, after, access.clients.stopping),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
