"""What a transaction keeps of each record it produced, so it can produce them again.

A transaction's journal is flat, :data:`FIELDS` plain values per record: the commands
partition it serves, topic, value, key, partition (-1: the partitioner's choice), what its
headers are (its *kind*: an event type, :data:`REPLY`, :data:`SNAPSHOT`, or the headers
themselves) and the request id. A tuple and a headers list per record, kept until the commit,
made every young collection of the writer several times costlier (writer_bench's backlog
drain: 500 ms of collections against 93).
"""

from __future__ import annotations

import functools
from typing import Protocol, TypeAlias

from schemas import APPEND_REPLY, HEADER_REQUEST, WRITER_SNAPSHOT, event_headers, record_headers

FIELDS = 7
REPLY, SNAPSHOT = "reply", "snapshot"  # never event types: those have a "/"

Headers: TypeAlias = list[tuple[str, str | bytes | None]]
Kind: TypeAlias = str | Headers

_REPLY_HEADERS = tuple(record_headers(APPEND_REPLY))
_SNAPSHOT_HEADERS = tuple(record_headers(WRITER_SNAPSHOT))


@functools.lru_cache(maxsize=1024)
def _event_headers(event_type: str) -> tuple[tuple[str, bytes], ...]:
    return tuple(event_headers(event_type))


def headers_of(kind: Kind, request_id: bytes | None) -> Headers:
    """A record's headers from what the journal keeps of them: an event's type, REPLY or
    SNAPSHOT, and the request id; any other headers are kept as they are."""
    if not isinstance(kind, str):
        return kind
    if kind == SNAPSHOT:
        return [*_SNAPSHOT_HEADERS]
    base = _REPLY_HEADERS if kind == REPLY else _event_headers(kind)
    return [*base, (HEADER_REQUEST, request_id)]


class Outbox(Protocol):
    """Where a batch's records go: the open transaction (see :mod:`.pipeline`)."""

    def put(
        self,
        serves: int,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        kind: Kind,
        request_id: bytes | None = None,
    ) -> None:
        """Produce a record; ``serves``: the commands partition it belongs to; ``kind`` and
        ``request_id``: what its headers are (:mod:`.journal`)."""
        ...
