"""``GET /v1/sessions/{session_id}/surface|transcript|audit``: the read models through
``projectors.views.Views``, with read-your-writes: ``at_least`` (a seq an append returned)
waits up to ``timeout_ms`` (capped by ``DSH_SERVE_MAX_WAIT_MS``) until the projection has
applied it, else ``503 PROJECTION_BEHIND``. Each poll of Redis runs on the thread pool and
each pause between polls on the event loop, so a read that waits holds no thread: a caller
waiting on many reads at once cannot take the pool from everyone else's."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from serve.access import Access, SessionAccess
from serve.appends import ERRORS
from serve.limits import MAX_SEQ
from serve.models import AuditResponse, SurfaceResponse, TranscriptResponse

router = APIRouter(prefix="/v1")

AtLeast = Annotated[
    int | None,
    Query(
        ge=0,
        le=MAX_SEQ,
        description="wait until the projection has applied this seq (read-your-writes)",
    ),
]
TimeoutMs = Annotated[
    int | None,
    Query(ge=0, description="how long to wait for at_least (default and cap: settings)"),
]
READ_ERRORS: dict[int | str, dict[str, Any]] = {
    status: ERRORS.get(status, ERRORS[503]) for status in (401, 403, 404, 409, 422, 503)
}


async def _read(
    access: Access, projection: str, at_least: int | None, timeout_ms: int | None
) -> Any:
    settings = access.clients.settings
    wait_ms = min(
        settings.default_wait_ms if timeout_ms is None else timeout_ms, settings.max_wait_ms
    )
    steps = access.clients.views.waits(
        projection, access.session_id, at_least=at_least, timeout_s=wait_ms / 1000
    )
    while True:
        pause, view = await run_in_threadpool(_poll, steps)
        if pause is None:
            return view
        await asyncio.sleep(pause)


def _poll(steps: Generator[float, None, Any]) -> tuple[float | None, Any]:
    """One step of a read: (the pause before the next, None), or (None, the view). Not
    StopIteration across ``await``: a coroutine turns that into a RuntimeError."""
    try:
        return next(steps), None
    except StopIteration as done:
        return None, done.value


@router.get(
    "/sessions/{session_id}/surface",
    response_model=SurfaceResponse,
    responses=READ_ERRORS,
    summary="What the model sees next",
)
async def surface(
    access: SessionAccess, at_least: AtLeast = None, timeout_ms: TimeoutMs = None
) -> JSONResponse:
    view = await _read(access, "surface", at_least, timeout_ms)
    return JSONResponse(view.to_json())


@router.get(
    "/sessions/{session_id}/transcript",
    response_model=TranscriptResponse,
    responses=READ_ERRORS,
    summary="What a human sees: every turn, compactions included",
)
async def transcript(
    access: SessionAccess, at_least: AtLeast = None, timeout_ms: TimeoutMs = None
) -> JSONResponse:
    view = await _read(access, "transcript", at_least, timeout_ms)
    entries = [e.event | {"kind": e.kind} for e in view.entries]
    return JSONResponse({"applied": view.applied, "entries": entries, "blocked": view.blocked})


@router.get(
    "/sessions/{session_id}/audit",
    response_model=AuditResponse,
    responses=READ_ERRORS,
    summary="Provenance: what each event cites, shadowed and was cited by",
)
async def audit(
    access: SessionAccess, at_least: AtLeast = None, timeout_ms: TimeoutMs = None
) -> JSONResponse:
    view = await _read(access, "audit", at_least, timeout_ms)
    return JSONResponse(view.to_json())
