"""What the session inspector (``/inspector/``) reads beside the read models: the sessions a
caller may see (recent and blocked, with the reason), one session's state in each projection,
the surface node by node with what each replacement replaced, and one event's provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from projectors.errors import SessionUnknownError
from serve.access import CallerAccess, SessionAccess
from serve.appends import ERRORS
from serve.limits import MAX_SEQ
from serve.models import (
    ProvenanceResponse,
    SessionList,
    SessionState,
    SurfaceNodesResponse,
    TranscriptPage,
)
from serve.problems import Problem

router = APIRouter(prefix="/v1")
PAGE = Path(__file__).parent / "inspector"
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: ERRORS[409]}
SESSION_ERRORS: dict[int | str, dict[str, Any]] = {
    **{s: ERRORS[s] for s in (401, 403, 422, 503)},
    **NOT_FOUND,
}


def _known(session_id: str, *views: dict[str, Any]) -> None:
    """404 for a session no projection applied anything of nor blocked; a blocked one is
    shown (up to the block), unlike the read-your-writes reads, which answer it with 409."""
    if all(v["applied"] < 0 and v["blocked"] is None for v in views):
        raise SessionUnknownError(f"session {session_id}: nothing of it was applied")


@router.get(
    "/sessions",
    response_model=SessionList,
    responses={s: ERRORS[s] for s in (401, 422, 503)},
    summary="The sessions the caller may see: recent, and blocked with the reason",
)
async def sessions(
    caller: CallerAccess,
    limit: Annotated[int, Query(ge=1, le=1000, description="most recent sessions listed")] = 50,
) -> JSONResponse:
    prefixes = None if caller.principal.tenant is None else caller.principal.prefixes
    inspection = caller.clients.inspection

    def read() -> dict[str, Any]:
        recent = inspection.recent(prefixes, limit)
        return {"recent": recent, "blocked": inspection.blocked(prefixes)}

    return JSONResponse(await run_in_threadpool(read))


@router.get(
    "/sessions/{session_id}",
    response_model=SessionState,
    responses=SESSION_ERRORS,
    summary="One session in each projection: applied seq, block reason, rebuild mark",
)
async def session_state(access: SessionAccess) -> JSONResponse:
    state = await run_in_threadpool(access.clients.inspection.state, access.session_id)
    _known(access.session_id, *state.values())
    return JSONResponse({"session_id": access.session_id, "projections": state})


@router.get(
    "/sessions/{session_id}/surface/nodes",
    response_model=SurfaceNodesResponse,
    responses=SESSION_ERRORS,
    summary="The surface node by node, each replacement with the seqs it replaced",
)
async def surface_nodes(access: SessionAccess) -> JSONResponse:
    view = await run_in_threadpool(access.clients.inspection.surface_nodes, access.session_id)
    _known(access.session_id, view)
    return JSONResponse(view)


@router.get(
    "/sessions/{session_id}/provenance/{seq}",
    response_model=ProvenanceResponse,
    responses=SESSION_ERRORS,
    summary="What an event cites and replaced (a summary's messages), and what replaced it",
)
async def provenance(
    access: SessionAccess,
    seq: Annotated[int, PathParam(ge=0, le=MAX_SEQ, description="the event's seq")],
) -> JSONResponse:
    found = await run_in_threadpool(access.clients.inspection.provenance, access.session_id, seq)
    if found is None:
        raise Problem(
            404, "EVENT_UNKNOWN", f"session {access.session_id}: the audit has no event {seq}"
        )
    return JSONResponse(found)


@router.get(
    "/sessions/{session_id}/transcript/entries",
    response_model=TranscriptPage,
    responses=SESSION_ERRORS,
    summary="A page of the transcript, also of a blocked session (up to the block)",
)
async def transcript_entries(
    access: SessionAccess,
    after: Annotated[int, Query(ge=-1, le=MAX_SEQ, description="entries after this seq")] = -1,
    limit: Annotated[int, Query(ge=1, le=10_000, description="most entries returned")] = 1000,
) -> JSONResponse:
    page = await run_in_threadpool(
        access.clients.inspection.transcript_entries, access.session_id, after, limit
    )
    _known(access.session_id, page)
    return JSONResponse(page)


def mount_page(app: FastAPI) -> None:
    """The page itself: static files, no build step, nothing fetched from elsewhere."""
    app.mount("/inspector", StaticFiles(directory=PAGE, html=True), name="inspector")
