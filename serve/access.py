"""The dependency every session route starts with: who calls (401), a session id the API
takes (422), and one the caller's tenant may use (403), in that order, before any body is
acted on or Redis is asked."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from serve.auth import Principal
from serve.clients import Clients
from serve.limits import check_session_id

# Declares the scheme in the OpenAPI document; the header itself is checked by Auth, which
# answers a missing or unknown token with a problem (not FastAPI's bare 403).
_bearer = HTTPBearer(auto_error=False, description="a token of DSH_SERVE_TOKENS (if any)")


def clients(request: Request) -> Clients:
    found: Clients = request.app.state.clients
    return found


def _principal(request: Request, found: Clients) -> Principal:
    """The caller: as :class:`CallerFirst` found it, else from the request's
    ``Authorization`` header (401)."""
    known: Principal | None = getattr(request.state, "principal", None)
    return known or found.auth.principal(request.headers.get("authorization"))


class CallerFirst(APIRoute):
    """A route that knows its caller (401) before it reads its body. FastAPI reads and parses
    a route's JSON body before it runs the route's dependencies: an unknown caller would have
    up to ``DSH_SERVE_MAX_BODY_BYTES`` parsed, or be told that its JSON is malformed."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def caller_first(request: Request) -> Response:
            authorization = request.headers.get("authorization")
            request.state.principal = clients(request).auth.principal(authorization)
            return await handler(request)

        return caller_first


@dataclass(frozen=True)
class Access:
    session_id: str
    principal: Principal
    clients: Clients


# Async, though nothing here waits: FastAPI runs a plain ``def`` dependency on the thread
# pool, a hop there and back on every request for a few microseconds of work.
async def session_access(
    request: Request,
    session_id: Annotated[str, Path(description="letters, digits and . _ : @ ~ -")],
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Access:
    found = clients(request)
    principal = _principal(request, found)
    check_session_id(session_id, found.settings.max_session_id_length)
    principal.check(session_id)
    return Access(session_id, principal, found)


SessionAccess = Annotated[Access, Depends(session_access)]


@dataclass(frozen=True)
class Caller:
    principal: Principal
    clients: Clients


async def caller(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    """A route over many sessions: who calls (401); it shows only the caller's tenant's."""
    found = clients(request)
    return Caller(_principal(request, found), found)


CallerAccess = Annotated[Caller, Depends(caller)]
