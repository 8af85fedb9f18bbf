"""The single-writer service and ``SessionClient`` (exactly-once appends over Kafka)."""

from producers.client import SessionClient
from producers.errors import (
    AppendTimeoutError,
    ConflictError,
    MalformedCommandError,
    PayloadTooLargeError,
    WriterFencedError,
    WriterUnavailableError,
    WrongPartitionError,
)
from producers.service import serve_writer
from schemas import draft

__all__ = [
    "AppendTimeoutError",
    "ConflictError",
    "MalformedCommandError",
    "PayloadTooLargeError",
    "SessionClient",
    "WriterFencedError",
    "WriterUnavailableError",
    "WrongPartitionError",
    "draft",
    "serve_writer",
]
