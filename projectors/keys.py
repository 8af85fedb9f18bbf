"""Redis key names. Every key of one session carries the hash tag ``{<session id>}`` so the
apply scripts touch a single slot and run unchanged on Redis Cluster."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "dsh"

    def session(self, session_id: str, *parts: str) -> str:
        return ":".join((self.prefix, _tagged(session_id), *parts))

    def meta(self, projection: str, session_id: str) -> str:
        return self.session(session_id, projection, "meta")

    def rebuilding(self, projection: str, session_id: str) -> str:
        """Set while a rebuild of the session is under way: what a reader sees then may be
        stale."""
        return self.session(session_id, projection, "rebuilding")

    def blocked(self, projection: str) -> str:
        return f"{self.prefix}:blocked:{projection}"

    def recent(self, projection: str) -> str:
        """A sorted set of session ids by the time of the last event the projection applied:
        which sessions moved last, without a scan of the keyspace."""
        return f"{self.prefix}:recent:{projection}"

    def mend(self, projection: str, partition: int) -> str:
        """The set of the partition's sessions a failover's mend found behind and has not
        rebuilt yet: whoever owns the partition next finishes it. One key per partition,
        without a hash tag: no command names two of them, nor one with a session's keys (a
        round trip may carry several, routed command by command on a cluster), so each may
        live in any slot."""
        return f"{self.prefix}:mend:{projection}:{partition}"

    def sentinel(self, projection: str, instance: str) -> str:
        return f"{self.prefix}:projector:{projection}:{instance}"


def _tagged(session_id: str) -> str:
    """``{<session id>}``: Redis Cluster hashes a key by the text between its first ``{`` and
    the first ``}`` after it, the same for every key of the session. Except when that is empty
    (an id that is empty or starts with ``}``): Redis then hashes each whole key, to slots of
    their own. Those ids are tagged with a digest instead; their keys start ``#{``, which no
    other id's do, so no two sessions share a key."""
    if session_id and session_id[0] != "}":
        return "{" + session_id + "}"
    return "#{" + hashlib.sha256(session_id.encode()).hexdigest()[:16] + "}" + session_id
