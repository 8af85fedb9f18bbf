"""What the API refuses before anything is parsed or appended: bodies over
``DSH_SERVE_MAX_BODY_BYTES``, session ids and idempotency keys that are too long or hold
characters outside their set."""

from __future__ import annotations

import re

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.rules import LONG_MAX
from serve.problems import Problem, response

# Letters, digits and `. _ : @ ~ -`: safe in a URL path segment, a Kafka key and a Redis key,
# and free of `{` `}`, which would break the hash tag every key of a session carries.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@~-]*")
REQUEST_ID = re.compile(r"[\x21-\x7e]{1,200}")  # printable ASCII, no spaces
# A seq is an Avro long; ASCII digits only (``str.isdigit`` takes "²" and other digits).
SEQ = re.compile(r"-?[0-9]{1,19}")
MAX_SEQ = LONG_MAX


def check_session_id(session_id: str, max_length: int) -> None:
    if len(session_id) > max_length or not SESSION_ID.fullmatch(session_id):
        raise Problem(
            422,
            "INVALID_SESSION_ID",
            f"a session id is 1 to {max_length} letters, digits and . _ : @ ~ - (starting with "
            "a letter or digit)",
        )


def check_request_id(request_id: str) -> None:
    if not REQUEST_ID.fullmatch(request_id):
        raise Problem(
            422,
            "INVALID_IDEMPOTENCY_KEY",
            "Idempotency-Key is 1 to 200 printable ASCII characters without spaces",
        )


def parse_last_event_id(value: str) -> int:
    """The seq a ``Last-Event-ID`` header resumes after: -1 (from the start) or more."""
    value = value.strip()
    if not SEQ.fullmatch(value) or int(value) > MAX_SEQ:
        raise Problem(
            422,
            "INVALID_LAST_EVENT_ID",
            f"Last-Event-ID is a seq: an integer of at most {MAX_SEQ}",
        )
    return max(int(value), -1)


class _TooLarge(HTTPException):
    """Raised from ``receive``: an HTTPException, so FastAPI's body reading lets it through
    (it turns other errors into a 400) and, if the app catches it, it is still a 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes")


class BodyLimit:
    """ASGI middleware: a body longer than ``limit`` is 413 before the app reads it whole,
    whether it says its length (Content-Length) or not (chunked)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, receive, send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(self.limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        problem = response(413, "BODY_TOO_LARGE", f"the request body is over {self.limit} bytes")
        await problem(scope, receive, send)
