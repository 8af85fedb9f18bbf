"""Redis key names. Every key of one session carries the hash tag ``{<session id>}`` so the
apply scripts touch a single slot and run unchanged on Redis Cluster."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "dsh"

    def session(self, session_id: str, *parts: str) -> str:
        return ":".join((self.prefix, "{" + session_id + "}", *parts))

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

    def sentinel(self, projection: str, instance: str) -> str:
        return f"{self.prefix}:projector:{projection}:{instance}"
