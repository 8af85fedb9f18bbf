"""Session files: the JSON Lines format, its migrations v0→v1→v2→v3, and the embedded store."""

from dsh.formats.header import SESSION_FORMAT_VERSION, SessionHeader
from dsh.formats.jsonl import encode_session, read_jsonl, read_wire, write_jsonl
from dsh.formats.migrations import MIGRATIONS, Migration, migrate
from dsh.formats.store import FileStore, StoreError
from dsh.formats.wire import Limits

__all__ = [
    "MIGRATIONS",
    "SESSION_FORMAT_VERSION",
    "FileStore",
    "Limits",
    "Migration",
    "SessionHeader",
    "StoreError",
    "encode_session",
    "migrate",
    "read_jsonl",
    "read_wire",
    "write_jsonl",
]
