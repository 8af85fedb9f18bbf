"""``SessionClient`` (exactly-once appends over Kafka) and, in ``producers.writer``, the
single-writer service it talks to."""

from producers.client import SessionClient
from producers.errors import (
    AppendTimeoutError,
    ConflictError,
    InvariantsModeError,
    MalformedCommandError,
    PayloadTooLargeError,
    ReplyUndecodableError,
    WriterFencedError,
    WriterUnavailableError,
    WrongPartitionError,
)
from schemas import draft

__all__ = [
    "AppendTimeoutError",
    "ConflictError",
    "InvariantsModeError",
    "MalformedCommandError",
    "PayloadTooLargeError",
    "ReplyUndecodableError",
    "SessionClient",
    "WriterFencedError",
    "WriterUnavailableError",
    "WrongPartitionError",
    "draft",
]
