"""The one error root of the project and the errors of the core.

Every error the project raises derives from :class:`SessionError` and carries a stable
``code`` string. Codes are part of the wire contract: the writer sends ``(class name, code,
message)`` to remote clients, which rebuild the same class with :func:`error_from_wire`.
Messages name the offending seq and field, like DSH's own.

Codes raised by the core, by class (the module that raises them in brackets):

- ``ValidationError``: ``INVALID_TYPE``, ``INVALID_ENVELOPE``, ``INVALID_IGNORABLE``
  [event, session]; ``TIME_OUT_OF_RANGE`` [session]; ``UNKNOWN_TYPE``, ``SEQ_NOT_NEXT``
  [fold]; ``JSON_NOT_FINITE``,
  ``JSON_KEY_NOT_STRING``, ``JSON_UNSUPPORTED_TYPE``, ``JSON_CYCLE``, ``JSON_TOO_DEEP``
  [json_snapshot];
  ``INVALID_DATA``, ``TOOL_RESULT_SHAPE``, ``TOOL_RESULT_CALL_ID_MISMATCH``,
  ``TOOL_RESULT_ERROR_FLAG``, ``INTERRUPTED_WITH_TOOL_CALLS`` [vocabulary].
- ``SurfaceError``: ``SURFACE_OP_REQUIRED``, ``SURFACE_OP_FORBIDDEN`` [fold];
  ``INVALID_SURFACE_OP`` [event, fold]; ``REPLACE_NOT_EARLIER``,
  ``REPLACE_START_NOT_ON_SURFACE``, ``REPLACE_END_NOT_ON_SURFACE``, ``REPLACE_REVERSED``
  [surface]; ``NODE0_REPLACEMENT_NOT_SYSTEM``, ``NODE0_RANGE_TOO_WIDE``
  [node_zero]; ``TOOL_REWRITE_NOT_SINGLE``, ``TOOL_REWRITE_TARGET``, ``TOOL_REWRITE_CHANGED``
  [tool_rewrite].
- ``ProvenanceError``: ``SOURCES_NOT_ALLOWED``, ``SOURCES_INVALID``, ``SOURCES_EMPTY``,
  ``SOURCES_NOT_EARLIER``, ``SOURCES_DUPLICATE``, ``REPLACE_SOURCES_MISSING`` [provenance].
- ``InvariantError``: ``TURN_ALREADY_OPEN``, ``TURN_NUMBER``, ``NO_OPEN_TURN``,
  ``TURN_MISMATCH``, ``STEP_STILL_OPEN``, ``STEP_ALREADY_OPEN``, ``STEP_NUMBER``,
  ``NO_OPEN_STEP``, ``STEP_MISMATCH``, ``TOOL_CALL_DUPLICATE``, ``TOOL_RESULT_DUPLICATE``,
  ``TOOL_RESULT_UNMATCHED`` [invariants].
- ``ProjectionError``: ``PROJECTION_INTERPRETER_MISSING``, ``PROJECTION_FAILED``,
  ``PROJECTION_INVALID``, ``PROJECTION_NOT_A_NODE``, ``PROJECTION_ENVELOPE``,
  ``PROJECTION_TYPE_RESERVED``, ``PROJECTION_TYPE_ALREADY_LOGGED`` [projections, fold,
  session].
- ``ReentrantAppendError``: ``REENTRANT_APPEND``.
- ``RestoreError``: the failing event's own code, or ``RESTORE_NOT_CONTIGUOUS`` [restore].
- ``ForkError``: ``OPEN_TURN``, ``INVALID_BOUNDARY`` [restore].
"""

from __future__ import annotations

from typing import Any, ClassVar


class SessionError(Exception):
    """Root of every error raised by dsh-pipeline."""

    default_code: ClassVar[str] = "SESSION_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code

    def to_wire(self) -> dict[str, Any]:
        """A JSON-safe description that :func:`error_from_wire` turns back into this error."""
        return {"error": type(self).__name__, "code": self.code, "message": self.message}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.to_wire()))


class ValidationError(SessionError):
    """An append was rejected; nothing was committed."""

    default_code = "VALIDATION"


class SurfaceError(ValidationError):
    default_code = "SURFACE"


class ProvenanceError(ValidationError):
    default_code = "PROVENANCE"


class InvariantError(ValidationError):
    default_code = "INVARIANT"


class ProjectionError(ValidationError):
    default_code = "PROJECTION"


class ReentrantAppendError(ValidationError):
    default_code = "REENTRANT_APPEND"


class RestoreError(SessionError):
    """A log could not be restored; ``index`` is the failing event's position in it."""

    default_code = "RESTORE"

    def __init__(self, message: str, *, index: int, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.index = index

    def to_wire(self) -> dict[str, Any]:
        return {**super().to_wire(), "index": self.index}


class FormatError(SessionError):
    """Unsupported or future session-file version, no migration route, or an untranslatable log."""

    default_code = "FORMAT"


class ForkError(SessionError):
    """``code`` is ``OPEN_TURN`` or ``INVALID_BOUNDARY``."""

    default_code = "INVALID_BOUNDARY"


_REGISTRY: dict[str, type[SessionError]] = {}


def register_error(cls: type[SessionError]) -> type[SessionError]:
    """Make an error class rebuildable from the wire. Other packages register theirs too."""
    _REGISTRY[cls.__name__] = cls
    return cls


for _cls in (
    SessionError,
    ValidationError,
    SurfaceError,
    ProvenanceError,
    InvariantError,
    ProjectionError,
    ReentrantAppendError,
    RestoreError,
    FormatError,
    ForkError,
):
    register_error(_cls)


def error_from_wire(wire: dict[str, Any]) -> SessionError:
    """Rebuild an error sent by :meth:`SessionError.to_wire`; unknown classes become the root."""
    cls = _REGISTRY.get(str(wire.get("error")), SessionError)
    message = str(wire.get("message", ""))
    code = str(wire.get("code") or cls.default_code)
    if issubclass(cls, RestoreError):
        return cls(message, index=int(wire.get("index", -1)), code=code)
    return cls(message, code=code)


def _rebuild(cls: type[SessionError], wire: dict[str, Any]) -> SessionError:
    return error_from_wire({**wire, "error": cls.__name__})
