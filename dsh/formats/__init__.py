"""Session files: the JSON Lines format, its migrations v0→v1→v2→v3, and the embedded store.

Where things are:

- ``wire``        strict lossless JSON lines (only ``\\n`` ends a line) and the size limits
- ``header``      the ``{"type":"session",…}`` first line
- ``log``         what migration steps share: line-tracking entries, dense renumbering
- ``v0_to_v1``, ``v1_to_v2``, ``v2_to_v3``  one adjacent step each (CONTRACT §5)
- ``migrations``  the registry of steps and the route from a file's version to v3
- ``jsonl``       ``read_jsonl`` / ``read_wire`` / ``write_jsonl``
- ``store``       ``FileStore``: one file per session, write-behind, ``flush`` as the barrier
"""

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
