"""Errors of the projectors; codes travel in DLQ headers and blocked-session reasons."""

from __future__ import annotations

from typing import Any

from dsh.errors import SessionError, register_error


@register_error
class ProjectorError(SessionError):
    default_code = "PROJECTOR"


@register_error
class PoisonRecordError(ProjectorError):
    """A record that can never be applied: bad key, wrong session, or refused by the rules."""

    default_code = "POISON_RECORD"


@register_error
class MissingInterpreterError(ProjectorError):
    """A message-projection event whose interpreter this process was not given."""

    default_code = "MISSING_INTERPRETER"


@register_error
class SessionBlockedError(ProjectorError):
    default_code = "SESSION_BLOCKED"
    view: Any = None  # the read model up to the block, when a read raised it


@register_error
class VerifyMismatchError(ProjectorError):
    default_code = "VERIFY_MISMATCH"


@register_error
class SessionUnknownError(ProjectorError):
    """No event of that session id: not in the read model, or not in the events topic."""

    default_code = "SESSION_UNKNOWN"


@register_error
class SessionRebuildingError(ProjectorError):
    """A read model read while a rebuild of it is under way: what was read may be stale."""

    default_code = "SESSION_REBUILDING"
    view: Any = None  # the read model as it stood, when a read raised it


@register_error
class ProjectionBehindError(ProjectorError):
    """A read asked for at least seq N and the projection had not applied it in time."""

    default_code = "PROJECTION_BEHIND"
