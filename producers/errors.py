"""Errors of the writer and the client. Rejections subclass ``ValidationError`` (nothing was
appended); the others say the outcome is unknown or the service is unreachable. All are
registered so a reply or a log line rebuilds the same class."""

from __future__ import annotations

from dsh.errors import SessionError, ValidationError, register_error


class ConflictError(ValidationError):
    """``expected_seq`` was not the seq the first event would get (optimistic concurrency)."""

    default_code = "EXPECTED_SEQ_MISMATCH"


class PayloadTooLargeError(ValidationError):
    """An event or a whole command exceeds the writer's size limit (``code`` says which)."""

    default_code = "COMMAND_TOO_LARGE"


class WrongPartitionError(ValidationError):
    """A command arrived on a commands partition its session does not hash to; a producer
    with a non-Kafka partitioner would otherwise split one session across two writers."""

    default_code = "WRONG_PARTITION"


class MalformedCommandError(ValidationError):
    """The command decodes but cannot be applied as such (no events, key/session mismatch)."""

    default_code = "MALFORMED_COMMAND"


class InvariantsModeError(ValidationError):
    """A command asked for an invariants mode (``dsh-invariants``) other than its session's:
    the mode is fixed when the session is created, by its first committed append."""

    default_code = "INVARIANTS_MODE"


class AppendTimeoutError(SessionError):
    """No reply in time. The append may or may not have committed: retrying with the same
    ``request_id`` is safe and returns the original outcome."""

    default_code = "APPEND_TIMEOUT"

    def __init__(self, message: str, *, request_id: str = "", code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.request_id = request_id


class WriterUnavailableError(SessionError):
    """The command could not be handed to Kafka, or the client was closed while waiting."""

    default_code = "WRITER_UNAVAILABLE"


class ReplyUndecodableError(SessionError):
    """The writer answered, but its reply could not be read into the client's result (a bug,
    or client and writer disagreeing on a format). The append may have committed: a read of
    the session says whether it did."""

    default_code = "REPLY_UNDECODABLE"


class WriterFencedError(SessionError):
    """This writer lost its transactional identity or group membership to a newer owner; it
    must stop, never publish again, and be restarted as a fresh member."""

    default_code = "WRITER_FENCED"


for _cls in (
    ConflictError,
    PayloadTooLargeError,
    WrongPartitionError,
    MalformedCommandError,
    InvariantsModeError,
    AppendTimeoutError,
    WriterUnavailableError,
    ReplyUndecodableError,
    WriterFencedError,
):
    register_error(_cls)
