"""``POST /v1/sessions/{session_id}/events``: one command of one or more events, all or
nothing, through the writer.

The request id is the ``Idempotency-Key`` header (generated when absent, never when empty,
and returned): the writer answers a retry from its request table with the original events, so
retrying after a 503 or a lost connection never appends twice.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from serve.access import CallerFirst, SessionAccess
from serve.limits import check_request_id
from serve.models import AppendRequest, AppendResponse, EventDraft, Problem
from serve.problems import Problem as ProblemError

router = APIRouter(prefix="/v1", route_class=CallerFirst)

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "content": {"application/problem+json": {}}}
    for status in (400, 401, 403, 409, 413, 422, 503)
}


@router.post(
    "/sessions/{session_id}/events",
    response_model=AppendResponse,
    responses=ERRORS,
    summary="Append one or more events, all or nothing",
)
async def append(
    body: AppendRequest,
    access: SessionAccess,
    request: Request,
    idempotency_key: Annotated[
        str | None,
        Header(description="the request id: a retry with the same key returns the same events"),
    ] = None,
) -> JSONResponse:
    settings = access.clients.settings
    if len(body.events) > settings.max_events:
        raise ProblemError(
            422,
            "TOO_MANY_EVENTS",
            f"{len(body.events)} events in one request; at most {settings.max_events}",
        )
    # Only an absent key is generated: an empty one is refused, or the caller's retry with
    # it would get another key and append again.
    request_id = f"http-{uuid.uuid4().hex}" if idempotency_key is None else idempotency_key
    check_request_id(request_id)
    request.state.request_id = request_id
    drafts = [_wire_draft(e) for e in body.events]
    tenant = access.principal.tenant
    client = await access.clients.appender_for(tenant)
    future = client.append_many_async(
        access.session_id,
        drafts,
        expected_seq=body.expected_seq,
        request_id=request_id,
        invariants=body.invariants,
    )
    events = await asyncio.wrap_future(future)
    return JSONResponse(
        {
            "request_id": request_id,
            "committed_seq": events[-1].seq,
            "events": [e.to_json() for e in events],
        },
        headers={"Idempotency-Key": request_id},
    )


def _wire_draft(event: EventDraft) -> dict[str, Any]:
    """The event as sent. Not ``schemas.draft``: it makes a list of whatever it is given (a
    string becomes its letters, a number a TypeError), and the core must see the caller's
    own value to reject it with its code."""
    d: dict[str, Any] = {"type": event.type, "data": event.data}
    if event.surface_op is not None:
        d["surfaceOp"] = event.surface_op
    if event.source_event_seqs is not None:
        d["sourceEventSeqs"] = event.source_event_seqs
    if event.ignorable:
        d["ignorable"] = True
    return d
