"""One logging setup for the services (`dsh writer`, `dsh project NAME`): structured lines on
stderr with level, logger, message and context fields, the level and format from typed
settings (``DSH_LOG_*``).

Context: any ``extra={...}`` a log call passes (``session``, ``partition``, …) becomes a field,
and so does :func:`log_context` for everything logged inside it. Secrets never reach a line:
pydantic's ``SecretStr`` prints as ``**********``, and any field whose name says it holds a
secret (password, secret, token, sasl, credential) is masked whatever its value.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any, Literal

import pydantic
from pydantic_settings import SettingsConfigDict

from servicekit.settings import ConfigError, StrictSettings

_SECRET_WORDS = ("password", "secret", "token", "sasl", "credential")
# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("dsh_log_context")
# The process's service name, on every line of every thread (threads do not inherit context).
_service: dict[str, str] = {}


class LogSettings(StrictSettings):
    """The services' log lines on stderr (``DSH_LOG_*``)."""

    model_config = SettingsConfigDict(env_prefix="DSH_LOG_", extra="forbid", frozen=True)

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Lowest level logged; a service's `--log-level` option overrides it."""
    format: Literal["json", "logfmt", "text"] = "json"
    """`json` (one object a line, for collectors), `logfmt` (key=value) or `text` (for a
    terminal)."""


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Fields added to every line logged inside the block (this thread or task)."""
    token = _context.set({**_context.get({}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def _masked(key: str, value: Any) -> Any:
    return "**********" if any(w in key.lower() for w in _SECRET_WORDS) else value


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The line as a flat mapping: time, level, logger, service, message, context."""
    out: dict[str, Any] = {
        "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
            timespec="milliseconds"
        ),
        "level": record.levelname,
        "logger": record.name,
        **_service,
        "message": record.getMessage(),
    }
    extra = {**_context.get({}), **{k: v for k, v in vars(record).items() if k not in _STANDARD}}
    out.update({k: _masked(k, v) for k, v in extra.items()})
    if record.exc_info:
        out["exception"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(fields(record), default=str, ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields(record).items())


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and not any(c in text for c in ' ="\n\\'):
        return text
    return json.dumps(text)  # quoted, with quotes, backslashes and newlines escaped


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        f = fields(record)
        head = f"{f.pop('time')} {f.pop('level')} {f.pop('logger')}: {f.pop('message')}"
        exception = f.pop("exception", None)
        context = " ".join(f"{k}={_logfmt_value(v)}" for k, v in f.items())
        return "\n".join(filter(None, [f"{head} {context}".rstrip(), exception]))


_FORMATTERS: dict[str, type[logging.Formatter]] = {
    "json": JsonFormatter,
    "logfmt": LogfmtFormatter,
    "text": TextFormatter,
}


def configure_logging(service: str, level: str | None = None) -> LogSettings:
    """Install the one root handler of this process (replacing any), at the settings' level
    unless ``level`` (e.g. a ``--log-level`` flag) overrides it. Every line carries
    ``service``. Called once, by the CLI entry of each service, before the service starts:
    a later ``logging.basicConfig`` in the service is then a no-op."""
    try:
        settings = LogSettings() if level is None else LogSettings(level=level.upper())  # type: ignore[arg-type]
    except pydantic.ValidationError as exc:
        raise ConfigError(f"logging settings: {exc}", code="BAD_LOG_SETTING") from None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_FORMATTERS[settings.format]())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level)
    _service["service"] = service
    return settings
