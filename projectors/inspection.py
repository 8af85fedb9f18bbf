"""What the session inspector reads from the three read models: which sessions there are
(the most recently active, and the blocked ones with the reason), the surface node by node with
the range each replacement took off it, and what one event replaced.

The recent list reads the transcript projector's recent index (``<prefix>:recent:transcript``,
a sorted set of its latest sessions by their last event's time), a page at a time until it has
enough the caller may see. Blocked sessions come from the projectors' blocked sets
(``<prefix>:blocked:<projection>``), their reasons from each meta hash.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from dsh.messages import projects_to_nothing
from dsh.vocabulary import message_of
from projectors.keys import Keys
from projectors.read_api import _entry, _loads, _seqs, json_object
from projectors.transcript import entry_id

PROJECTIONS = ("surface", "transcript", "audit")
_PAGE = 500


def _visible(session_id: str, prefixes: tuple[str, ...] | None) -> bool:
    return prefixes is None or session_id.startswith(prefixes)


@dataclass
class Inspection:
    client: redis.Redis | redis.RedisCluster
    keys: Keys = field(default_factory=Keys)

    def recent(self, prefixes: tuple[str, ...] | None, limit: int) -> list[dict[str, Any]]:
        """The ``limit`` sessions that moved last, newest first, from the transcript
        projector's recent index (its latest sessions). ``prefixes``: only sessions starting
        with one of them (``None``: every session)."""
        key = self.keys.recent("transcript")
        picked: list[tuple[str, int]] = []
        start = 0
        while len(picked) < limit:  # a page at a time: other tenants' sessions are skipped
            page: list[tuple[bytes, float]] = self.client.zrevrange(  # type: ignore[assignment]
                key, start, start + _PAGE - 1, withscores=True
            )
            for member, score in page:
                sid = member.decode()
                if _visible(sid, prefixes) and len(picked) < limit:
                    picked.append((sid, int(score)))
            if len(page) < _PAGE:
                break
            start += _PAGE
        pipe = self.client.pipeline(transaction=False)
        for sid, _ in picked:
            pipe.hmget(self.keys.meta("transcript", sid), "applied", "blocked")
        metas = pipe.execute() if picked else []
        return [
            {
                "session_id": sid,
                "applied": int(applied) if applied is not None else -1,
                "time": time,
                "blocked": blocked is not None,
            }
            for (sid, time), (applied, blocked) in zip(picked, metas, strict=True)
        ]

    def blocked(self, prefixes: tuple[str, ...] | None) -> list[dict[str, Any]]:
        """Every blocked session the caller may see, with each projection's reason."""
        pipe = self.client.pipeline(transaction=False)
        for projection in PROJECTIONS:
            pipe.smembers(self.keys.blocked(projection))
        members = pipe.execute()
        wanted: list[tuple[str, str]] = []
        for projection, sids in zip(PROJECTIONS, members, strict=True):
            for raw in sids:
                sid = raw.decode() if isinstance(raw, bytes) else raw
                if _visible(sid, prefixes):
                    wanted.append((projection, sid))
        for projection, sid in wanted:
            pipe.hget(self.keys.meta(projection, sid), "blocked")
        reasons: dict[str, dict[str, Any]] = {}
        for (projection, sid), reason in zip(wanted, pipe.execute(), strict=True):
            if reason is not None:  # unblocked since the set was read
                reasons.setdefault(sid, {})[projection] = json_object(reason)
        return [{"session_id": sid, "reasons": reasons[sid]} for sid in sorted(reasons)]

    def state(self, session_id: str) -> dict[str, dict[str, Any]]:
        """Each projection's applied seq, block reason and rebuild mark."""
        pipe = self.client.pipeline(transaction=True)
        for projection in PROJECTIONS:
            pipe.hgetall(self.keys.meta(projection, session_id))
            pipe.get(self.keys.rebuilding(projection, session_id))
        replies = pipe.execute()
        out = {}
        for i, projection in enumerate(PROJECTIONS):
            meta, mark = replies[2 * i], replies[2 * i + 1]
            out[projection] = {
                "applied": int(meta.get(b"applied", -1)),
                "blocked": json_object(meta.get(b"blocked")),
                "rebuilding": json_object(mark),
            }
        return out

    def surface_nodes(self, session_id: str) -> dict[str, Any]:
        """The surface node by node (empty messages too, flagged), each replacement with the
        seqs it replaced (from the audit, which may lag the surface: then ``replaced`` is
        missing on the newest nodes)."""
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(k.meta("surface", session_id))
        pipe.lrange(k.session(session_id, "surface", "nodes"), 0, -1)
        pipe.hgetall(k.session(session_id, "surface", "messages"))
        pipe.hget(k.session(session_id, "audit", "index"), "replaces")
        meta, raw_nodes, messages, replaces = pipe.execute()
        nodes = [int(n) for n in raw_nodes]
        current = set(nodes)
        replacements = [s for s in _seqs(replaces) if s in current]
        records = self._records(session_id, replacements)
        out_nodes = []
        for seq in nodes:
            raw = messages.get(str(seq).encode())
            node: dict[str, Any] = {"type": None, "message": None} if raw is None else _loads(raw)
            entry: dict[str, Any] = {"seq": seq, "type": node["type"], "message": node["message"]}
            if raw is not None:
                entry["empty"] = projects_to_nothing(str(node["type"]), node["message"])
            record = records.get(seq)
            if record is not None and "shadowed" in record:
                entry["replaced"] = record["shadowed"]
            out_nodes.append(entry)
        return {
            "applied": int(meta.get(b"applied", -1)),
            "replaceGeneration": int(meta.get(b"rg", 0)),
            "contentGeneration": int(meta.get(b"cg", 0)),
            "nodes": out_nodes,
            "blocked": json_object(meta.get(b"blocked")),
        }

    def provenance(self, session_id: str, seq: int) -> dict[str, Any] | None:
        """What event ``seq`` cites, what it replaced (each with its message where a read model
        keeps it: the transcript keeps every appended one) and what later cited or replaced it;
        ``None`` when the audit has no such event."""
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        pipe.hget(k.session(session_id, "audit", "events"), seq)
        pipe.hget(k.session(session_id, "audit", "cited_by"), seq)
        pipe.hget(k.session(session_id, "audit", "shadowed_by"), seq)
        raw, cited_by, shadowed_by = pipe.execute()
        if raw is None:
            return None
        record = _loads(raw)
        replaced = list(record.get("shadowed", []))
        records = self._records(session_id, replaced)
        messages = self._appended_messages(session_id, replaced)
        out: dict[str, Any] = {"seq": seq, **record, "citedBy": _seqs(cited_by)}
        if shadowed_by is not None:
            out["shadowedBy"] = int(shadowed_by)
        out["replaced"] = [_replaced(s, records.get(s, {}), messages.get(s)) for s in replaced]
        return out

    def transcript_entries(self, session_id: str, after: int, limit: int) -> dict[str, Any]:
        """A page of the transcript after seq ``after``, blocked or not (the stream and the
        read-your-writes read refuse a blocked session; the inspector shows what was applied
        up to the block)."""
        k = self.keys
        start = "-" if after < 0 else "(" + entry_id(after)
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(k.meta("transcript", session_id))
        pipe.xrange(k.session(session_id, "transcript"), start, "+", limit)
        meta, raw = pipe.execute()
        entries = [e.event | {"kind": e.kind} for e in (_entry(fields) for _, fields in raw)]
        return {
            "applied": int(meta.get(b"applied", -1)),
            "entries": entries,
            "blocked": json_object(meta.get(b"blocked")),
        }

    def _records(self, session_id: str, seqs: Sequence[int]) -> dict[int, dict[str, Any]]:
        if not seqs:
            return {}
        raws = self.client.hmget(self.keys.session(session_id, "audit", "events"), list(seqs))
        return {s: _loads(r) for s, r in zip(seqs, raws, strict=True) if r is not None}

    def _appended_messages(self, session_id: str, seqs: Iterable[int]) -> dict[int, Any]:
        """The messages of those events the transcript has (every append-origin one)."""
        key = self.keys.session(session_id, "transcript")
        pipe = self.client.pipeline(transaction=False)
        wanted = list(seqs)
        for s in wanted:
            pipe.xrange(key, entry_id(s), entry_id(s))
        out = {}
        for s, found in zip(wanted, pipe.execute() if wanted else [], strict=True):
            if found:
                event = _loads(found[0][1][b"event"])
                out[s] = message_of(event["type"], event["data"])
        return out


def _replaced(seq: int, record: dict[str, Any], appended: Any) -> dict[str, Any]:
    """One replaced event: its message from the transcript (an appended one) or from its audit
    record (a replacement keeps its data there)."""
    out: dict[str, Any] = {"seq": seq, "type": record.get("type"), "time": record.get("time")}
    message = appended
    if message is None and "data" in record and out["type"] is not None:
        message = message_of(out["type"], record["data"])
    out["message"] = message
    if "shadowed" in record:
        out["replaced"] = record["shadowed"]
    return out
