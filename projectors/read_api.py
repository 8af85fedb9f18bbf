"""Reading the three projections (what ``dsh show`` prints and a UI would call)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from dsh.messages import projects_to_nothing
from projectors.keys import Keys
from projectors.transcript import entry_id


def _seqs(value: bytes | None) -> list[int]:
    return [int(s) for s in value.split(b",")] if value else []


def _loads(raw: bytes | str) -> Any:
    """orjson first: a surface of 100 messages parses in a fifth of the time. The projections
    write a value orjson refuses (a NaN) with the standard library, so that reads it back."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def json_object(raw: Any) -> dict[str, Any] | None:
    """A JSON object a read model keeps as a string (a block's reason, a rebuild's mark)."""
    return None if raw is None else dict(_loads(raw))


def _blocked(meta: dict[bytes, bytes]) -> dict[str, Any] | None:
    return json_object(meta.get(b"blocked"))


@dataclass
class SurfaceView:
    applied: int
    nodes: list[int]
    replace_generation: int
    content_generation: int
    node_messages: dict[int, dict[str, Any]]  # seq -> {"type", "message", "data"?}
    blocked: dict[str, Any] | None
    rebuilding: dict[str, Any] | None = None  # a rebuild under way: this may be stale

    @property
    def messages(self) -> list[Any]:
        """What the model sees next: ``Session.derive_messages()``."""
        out = []
        for seq in self.nodes:
            node = self.node_messages[seq]
            if projects_to_nothing(node["type"], node["message"]):
                continue
            out.append(node["message"])
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "nodes": self.nodes,
            "replaceGeneration": self.replace_generation,
            "contentGeneration": self.content_generation,
            "messages": self.messages,
            "blocked": self.blocked,
        }


@dataclass(frozen=True)
class TranscriptEntry:
    seq: int
    kind: str  # "surface" or "progress"
    type: str
    event: dict[str, Any]


@dataclass(frozen=True)
class TranscriptView:
    applied: int
    entries: list[TranscriptEntry]
    blocked: dict[str, Any] | None
    rebuilding: dict[str, Any] | None = None  # a rebuild under way: this may be stale


@dataclass
class AuditView:
    applied: int
    events: dict[int, dict[str, Any]]
    cited_by: dict[int, list[int]]
    shadowed_by: dict[int, int]
    index: dict[str, list[int]]
    blocked: dict[str, Any] | None
    rebuilding: dict[str, Any] | None = None  # a rebuild under way: this may be stale

    def replaced(self, seq: int) -> list[dict[str, Any]]:
        """What a replacement (e.g. a compaction summary) took off the surface, oldest first."""
        return [{"seq": s, **self.events[s]} for s in self.events[seq].get("shadowed", [])]

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "events": {
                str(seq): {
                    **record,
                    "citedBy": self.cited_by.get(seq, []),
                    **({"shadowedBy": self.shadowed_by[seq]} if seq in self.shadowed_by else {}),
                }
                for seq, record in sorted(self.events.items())
            },
            "index": self.index,
            "blocked": self.blocked,
        }


@dataclass
class Reader:
    client: redis.Redis | redis.RedisCluster  # a session's keys share a slot: MULTI works on both
    keys: Keys = field(default_factory=Keys)

    def surface(self, session_id: str) -> SurfaceView:
        k = self.keys
        pipe = self.client.pipeline(transaction=True)  # one consistent snapshot
        messages = k.session(session_id, "surface", "messages")
        pipe.hgetall(k.meta("surface", session_id))
        # Fields and values as two lists (in the same order: nothing changes the hash inside
        # the MULTI), rather than a dict of them built only to be taken apart again.
        pipe.hkeys(messages)
        pipe.hvals(messages)
        pipe.lrange(k.session(session_id, "surface", "nodes"), 0, -1)
        pipe.get(k.rebuilding("surface", session_id))
        meta, seqs, values, nodes, mark = pipe.execute()
        return SurfaceView(
            applied=int(meta.get(b"applied", -1)),
            nodes=[int(n) for n in nodes],
            replace_generation=int(meta.get(b"rg", 0)),
            content_generation=int(meta.get(b"cg", 0)),
            node_messages=dict(zip(map(int, seqs), map(_loads, values), strict=True)),
            blocked=_blocked(meta),
            rebuilding=json_object(mark),
        )

    def transcript_applied(self, session_id: str) -> int:
        value = self.client.hget(self.keys.meta("transcript", session_id), "applied")
        return -1 if value is None else int(value)

    def transcript(
        self, session_id: str, after: int = -1, count: int | None = None
    ) -> list[TranscriptEntry]:
        start = "-" if after < 0 else "(" + entry_id(after)
        key = self.keys.session(session_id, "transcript")
        raw: Any = self.client.xrange(key, start, "+", count)
        return [_entry(fields) for _, fields in raw]

    def tail(
        self, session_id: str, after: int = -1, block_ms: int = 1000
    ) -> Iterator[TranscriptEntry]:
        """Follow the transcript live (XREAD BLOCK), forever; stop iterating to stop."""
        key = self.keys.session(session_id, "transcript")
        last = "0-0" if after < 0 else entry_id(after)
        while True:
            reply: Any = self.client.xread({key: last}, block=block_ms)
            for _, entries in reply or ():
                for entry_key, fields in entries:
                    last = entry_key.decode() if isinstance(entry_key, bytes) else entry_key
                    yield _entry(fields)

    def audit(self, session_id: str) -> AuditView:
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(k.meta("audit", session_id))
        for part in ("events", "cited_by", "shadowed_by", "index"):
            pipe.hgetall(k.session(session_id, "audit", part))
        pipe.get(k.rebuilding("audit", session_id))
        meta, events, cited_by, shadowed_by, index, mark = pipe.execute()
        return AuditView(
            applied=int(meta.get(b"applied", -1)),
            events={int(f): _loads(v) for f, v in events.items()},
            cited_by={int(f): _seqs(v) for f, v in cited_by.items()},
            shadowed_by={int(f): int(v) for f, v in shadowed_by.items()},
            index={f.decode(): _seqs(v) for f, v in index.items()},
            blocked=_blocked(meta),
            rebuilding=json_object(mark),
        )

    def transcript_view(self, session_id: str) -> TranscriptView:
        """Every entry with the transcript's applied seq, block and rebuild mark, in one
        MULTI."""
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(k.meta("transcript", session_id))
        pipe.xrange(k.session(session_id, "transcript"), "-", "+")
        pipe.get(k.rebuilding("transcript", session_id))
        meta, raw, mark = pipe.execute()
        return TranscriptView(
            applied=int(meta.get(b"applied", -1)),
            entries=[_entry(fields) for _, fields in raw],
            blocked=_blocked(meta),
            rebuilding=json_object(mark),
        )

    def blocked(self, projection: str, session_id: str) -> dict[str, Any] | None:
        return json_object(self.client.hget(self.keys.meta(projection, session_id), "blocked"))


def _entry(fields: dict[bytes, bytes]) -> TranscriptEntry:
    event = _loads(fields[b"event"])
    return TranscriptEntry(event["seq"], fields[b"kind"].decode(), fields[b"type"].decode(), event)
