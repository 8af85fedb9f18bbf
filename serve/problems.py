"""Every error as RFC 9457 problem details (``application/problem+json``).

``type`` is a stable URI per code (``https://dsh-pipeline.dev/problems/<code>``, the code in
lower case with dashes), ``code`` our stable error code, ``title`` and ``status`` follow from
the code's class, ``detail`` is the error's message (it names the offending seq and field).
The status of each class is decided here and tabled in docs/http-api.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dsh.errors import SessionError, ValidationError
from producers.errors import (
    AppendTimeoutError,
    ConflictError,
    InvariantsModeError,
    PayloadTooLargeError,
    WriterUnavailableError,
)
from producers.tenancy import TenantForbiddenError
from projectors.errors import (
    ProjectionBehindError,
    SessionBlockedError,
    SessionRebuildingError,
    SessionUnknownError,
)
from servicekit.kafka_errors import KafkaUnreachableError
from servicekit.topics import TopicError

PROBLEM_BASE = "https://dsh-pipeline.dev/problems/"
MEDIA_TYPE = "application/problem+json"

# Most specific first: the first class an error is an instance of decides its status.
# PROJECTION_BEHIND and SESSION_REBUILDING are 503 with Retry-After, not 504: the service
# itself answered, in time, that the read model is not there yet, and a client retrying after
# Retry-After is what should follow (a 504 says an upstream server did not answer).
STATUS_BY_CLASS: tuple[tuple[type[SessionError], int], ...] = (
    (TenantForbiddenError, 403),
    (ConflictError, 409),
    (InvariantsModeError, 409),
    (PayloadTooLargeError, 413),
    (ValidationError, 422),
    (SessionUnknownError, 404),
    # A blocked session needs an operator (fix, then `dsh replay`): retrying will not help.
    (SessionBlockedError, 409),
    (ProjectionBehindError, 503),
    (SessionRebuildingError, 503),
    (AppendTimeoutError, 503),
    (WriterUnavailableError, 503),
    (KafkaUnreachableError, 503),
    (TopicError, 503),
)
# Redis out of reach for a while, whatever the way: no connection or no answer, a cluster
# failing over (CLUSTERDOWN, MASTERDOWN, TRYAGAIN) or with a slot no node serves, a primary
# demoted to a replica (READONLY). A client retries after Retry-After, as for a refused
# connection; any other Redis error is a bug (500).
REDIS_OUT_OF_REACH: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.SlotNotCoveredError,
)


def cluster_unreachable(exc: BaseException) -> bool:
    """No node of a Redis Cluster answered: a ``RedisClusterException`` (not a RedisError)
    raised from the connection error, which redis-py 8.2 names ``RedisClusterUnreachableError``
    and earlier versions do not. The cause, not the class, so any supported redis-py will do."""
    return isinstance(exc, redis.exceptions.RedisClusterException) and isinstance(
        exc.__cause__, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError
    )


TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    422: "Unprocessable content",
    500: "Internal server error",
    503: "Service unavailable",
}


UNPARSABLE = (UnicodeDecodeError, RecursionError)


def _unparsable(cause: BaseException) -> str:
    if isinstance(cause, UnicodeDecodeError):
        return f"not UTF-8 at byte {cause.start}"
    return "nested too deep"


# A field the core checks too: a request wrong only there gets the core's code for it, as
# the API's other rejections of an event do ("ignorable": null is the core's INVALID_IGNORABLE).
CORE_FIELD_CODES = {"ignorable": "INVALID_IGNORABLE"}


def _invalid_code(errors: list[dict[str, Any]]) -> str:
    """The core's code where every error is in one field of an event it checks too (the
    location is body, events, index, field), else REQUEST_INVALID."""
    codes = {
        CORE_FIELD_CODES.get(str(loc[3]))
        if len(loc := e["loc"]) == 4 and loc[:2] == ["body", "events"]
        else None
        for e in errors
    }
    code = codes.pop() if len(codes) == 1 else None
    return code or "REQUEST_INVALID"


def problem_type(code: str) -> str:
    return PROBLEM_BASE + code.lower().replace("_", "-")


class Problem(Exception):
    """An HTTP error of the service itself (auth, limits), raised as problem details."""

    def __init__(self, status: int, code: str, detail: str, **headers: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.headers = status, code, detail, headers


def status_of(exc: SessionError) -> int:
    return next((status for cls, status in STATUS_BY_CLASS if isinstance(exc, cls)), 500)


def response(
    status: int,
    code: str,
    detail: str,
    request: Request | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": problem_type(code),
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "code": code,
    }
    if request is not None:
        body.update(_known(request))
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, headers=headers, media_type=MEDIA_TYPE)


def _known(request: Request) -> dict[str, str]:
    """The session id and request id of the request, where they are known by now."""
    out = {}
    session_id = request.path_params.get("session_id")
    if session_id is not None and len(session_id) <= 1024:  # not echo a huge one back
        out["session_id"] = str(session_id)
    request_id = getattr(request.state, "request_id", None)
    if request_id is not None:
        out["request_id"] = str(request_id)
    return out


def retry_after(seconds: int) -> dict[str, str]:
    return {"Retry-After": str(seconds)}


def install(app: FastAPI, retry_after_s: int) -> None:
    """Problem details for our errors, the service's own, FastAPI's validation and routing."""

    async def session_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SessionError)
        status = status_of(exc)
        headers = retry_after(retry_after_s) if status == 503 else None
        return response(status, exc.code, exc.message, request, headers)

    async def problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return response(exc.status, exc.code, exc.detail, request, exc.headers or None)

    async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg")), "type": str(e.get("type"))}
            for e in exc.errors()
        ]
        if any(e["type"] == "json_invalid" for e in errors):
            return response(400, "MALFORMED_JSON", "the body is not JSON", request, errors=errors)
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
        return response(422, _invalid_code(errors), detail, request, errors=errors)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        # FastAPI's generic 400 for a body it could not parse other than by JSONDecodeError:
        # bytes that are not UTF-8, or nesting past the parser's recursion limit.
        if exc.status_code == 400 and isinstance(exc.__cause__, UNPARSABLE):
            detail = f"the body is not JSON ({_unparsable(exc.__cause__)})"
            return response(400, "MALFORMED_JSON", detail, request)
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "BODY_TOO_LARGE"}.get(
            exc.status_code, "HTTP_ERROR"
        )
        return response(exc.status_code, code, str(exc.detail), request, exc.headers)

    async def redis_down(request: Request, exc: Exception) -> JSONResponse:
        detail = f"Redis did not answer ({type(exc).__name__}): the read models are out of reach"
        return response(503, "REDIS_UNREACHABLE", detail, request, retry_after(retry_after_s))

    async def cluster_error(request: Request, exc: Exception) -> JSONResponse:
        if cluster_unreachable(exc):
            return await redis_down(request, exc)
        raise exc  # a bug (a command across slots, …): 500, and the service logs it

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # Starlette logs the traceback after this answers; the caller learns only that.
        return response(500, "INTERNAL", "an unexpected error: the service's log has it", request)

    app.add_exception_handler(Exception, internal)
    app.add_exception_handler(SessionError, session_error)
    for redis_error in REDIS_OUT_OF_REACH:
        app.add_exception_handler(redis_error, redis_down)
    app.add_exception_handler(redis.exceptions.RedisClusterException, cluster_error)
    app.add_exception_handler(Problem, problem)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
