"""What `dsh serve` fails with before it serves: importable without the ``serve`` extra."""

from __future__ import annotations

from dsh.errors import SessionError, register_error


@register_error
class ServeDependencyError(SessionError):
    """The ``serve`` extra (FastAPI, uvicorn) is not installed."""

    default_code = "SERVE_EXTRA_MISSING"
