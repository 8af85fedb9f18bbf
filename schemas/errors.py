"""Errors of the wire format. All are :class:`dsh.errors.SessionError` subclasses with stable
codes, registered so that a DLQ reason or a remote reply can rebuild the same class."""

from __future__ import annotations

from dsh.errors import SessionError, register_error


class CodecError(SessionError):
    """Bytes could not be decoded, or a value could not be encoded, losslessly."""

    default_code = "CODEC"


class BadMarkerError(CodecError):
    """The bytes do not start with the Avro single-object marker C3 01."""

    default_code = "CODEC_BAD_MARKER"


class UnknownFingerprintError(CodecError):
    """The writer schema's fingerprint is not in the local schema store: we never guess."""

    default_code = "CODEC_UNKNOWN_FINGERPRINT"

    def __init__(self, message: str, *, fingerprint: str = "", code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.fingerprint = fingerprint


class CorruptRecordError(CodecError):
    """A known schema, but the body is truncated, has trailing bytes or is not valid Avro."""

    default_code = "CODEC_CORRUPT"


class SchemaMismatchError(CodecError):
    """The record is of another kind than asked for (e.g. a command where an event was
    expected), or its writer schema cannot be resolved against the reader schema."""

    default_code = "CODEC_SCHEMA_MISMATCH"


class UnencodableError(CodecError):
    """The value is not lossless JSON (NaN, non-string key, bytes, lone surrogate, …) or does
    not fit the record being encoded."""

    default_code = "CODEC_UNENCODABLE"


class TooDeep(Exception):
    """Internal to the codec: a frozen read met a JsonValue nested deeper than
    ``avro_read.FROZEN_JSON_DEPTH`` (``Codec.decode_frozen`` then decodes plainly). Defined
    here, not beside the readers, so the native build's copy of them raises this same class."""


for _cls in (
    CodecError,
    BadMarkerError,
    UnknownFingerprintError,
    CorruptRecordError,
    SchemaMismatchError,
    UnencodableError,
):
    register_error(_cls)
