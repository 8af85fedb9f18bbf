"""What the runtime holds of Redis: the per-session states batches are planned against, and the
link batches travel on.

A state is cached between batches (least recently used out first) and read back from Redis on
a miss. Whatever the cache believes, Redis decides (the apply script's seq check), so dropping
an entry is always safe: it costs a read.

A blocked session is the exception: its events are never sent, so Redis never gets to say that
another process (``dsh replay``) unblocked it. Before each batch that holds its events the
blocked set is asked again, and an entry no longer in it is read back like a miss.

When a batch fails (Redis away) the cache is dropped, but what it believed applied is
remembered (:attr:`SessionStore.unconfirmed`) until the runtime asks Redis (:meth:`behind`):
a failover to a replica that had not received the last writes leaves those sessions behind,
and a quiet one would never show a gap.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from projectors.batch_io import Link, Pending, RedisClient, batch_io, pipelined
from projectors.projection import Projection, as_int

S = TypeVar("S")


@dataclass
class Entry(Generic[S]):
    state: S
    blocked: bool = False
    apply: tuple[Any, ...] | None = None  # ("EVALSHA", sha, numkeys, *keys), built once
    partition: int = -1  # where its events come from: a revoked partition's entries go


class InFlight(Protocol):
    """A batch submitted to Redis whose replies may not be read yet."""

    @property
    def sessions(self) -> Mapping[str, int]: ...

    @property
    def pending(self) -> Pending: ...


class SessionStore(Generic[S]):
    def __init__(self, projection: Projection[S], client: RedisClient, keep: int) -> None:
        self.projection = projection
        self.client = client
        self.keep = keep
        self.cache: OrderedDict[str, Entry[S]] = OrderedDict()
        self.link: Link = batch_io(client)  # one Redis, or batches split by slot over a cluster
        self.blocked_key = projection.keys.blocked(projection.name)
        # Session → (partition, applied seq) the cache believed when it was last reset, not
        # confirmed in Redis since: bounded by the cache, the sessions recently applied.
        self.unconfirmed: dict[str, tuple[int, int]] = {}

    def load(self, sessions: Mapping[str, int], inflight: InFlight | None = None) -> None:
        """Make sure every session (→ its partition) is cached; the ones held move to the end."""
        cache = self.cache
        self._drop_unblocked([sid for sid in sessions if (e := cache.get(sid)) and e.blocked])
        missing = [sid for sid in sessions if sid not in cache]
        for sid in sessions.keys() - set(missing):
            cache.move_to_end(sid)
        if not missing:
            return
        if inflight is not None and not inflight.sessions.keys().isdisjoint(missing):
            # A session of the batch in flight was dropped from the cache (Redis refused one
            # of its events, or it was evicted): read its state only after Redis ran that batch.
            inflight.pending.result()
        projection = self.projection
        reads = [projection.load_reads(sid) for sid in missing]
        commands = [c for session_reads in reads for c in session_reads]
        commands.append(("SMISMEMBER", self.blocked_key, *missing))
        replies = pipelined(self.client, commands)
        blocked = replies[-1]
        at = 0
        for sid, session_reads, is_blocked in zip(missing, reads, blocked, strict=True):
            state = projection.load(replies[at : at + len(session_reads)])
            at += len(session_reads)
            cache[sid] = Entry(state, bool(is_blocked), partition=sessions[sid])

    def _drop_unblocked(self, blocked: list[str]) -> None:
        """Drop the entries of ``blocked`` that left the blocked set: they are read again.

        Asked before every batch that holds their events, not every few seconds: a session
        still in the set at this read is unblocked (a replay's SREM) only after it, so the
        replay's catch-up applies the events this batch skips. One round trip, and only for
        a batch holding a blocked session. A read that comes early (between a rewrite's SREM
        and its SADD, or before this process's own block in flight lands) costs a reload and
        nothing else: the apply script reads the meta hash and answers BLOCKED, or a gap
        rebuilds the session, which blocks it again."""
        if not blocked:
            return
        (members,) = pipelined(self.client, [("SMISMEMBER", self.blocked_key, *blocked)])
        for sid, member in zip(blocked, members, strict=True):
            if not member:
                del self.cache[sid]

    def evict(self) -> None:
        """Down to the size kept. Called only once a batch is settled: every session of the
        batch stays cached while it is in hand."""
        while len(self.cache) > self.keep:
            self.cache.popitem(last=False)

    def forget_partitions(self, partitions: Collection[int]) -> dict[str, tuple[int, int]]:
        """The next owner applies these partitions' sessions: what the cache believes of them
        is stale from now on. The sessions of the partitions kept stay cached. Returns what
        :attr:`unconfirmed` held of them: the next owner's to mend, but only this process
        knows it (:meth:`.handover.Handover.moved`)."""
        cache = self.cache
        for sid in [
            sid for sid, e in cache.items() if e.partition in partitions or e.partition < 0
        ]:
            del cache[sid]
        unconfirmed = self.unconfirmed
        return {
            sid: unconfirmed.pop(sid)
            for sid in [sid for sid, (p, _) in unconfirmed.items() if p in partitions]
        }

    def reset(self, unacked: Collection[str] = ()) -> None:
        """After a failed batch: the link may hold unread replies, the cache be ahead of Redis.
        What it believed applied joins :attr:`unconfirmed` (the higher seq of a session wins:
        after a second failure the cache holds only what was read back since the first).
        ``unacked``: the sessions with records in the batches that failed. What the cache
        believes of them counts events Redis never acknowledged, and those are applied again
        (here, or by their partition's next owner), where a gap shows what a failover lost:
        they are left out."""
        applied_of, unconfirmed = self.projection.applied, self.unconfirmed
        for sid, entry in self.cache.items():
            applied = applied_of(entry.state)
            # A blocked one too: a failover may have lost its block with its last writes, and
            # a rebuild blocks it again at its poison record.
            if entry.partition < 0 or applied < 0 or sid in unacked:
                continue
            known = unconfirmed.get(sid)
            if known is None or known[1] < applied:
                unconfirmed[sid] = (entry.partition, applied)
        self.link.reset()
        self.cache.clear()

    def behind(self, believed: Mapping[str, tuple[int, int]] | None = None) -> dict[int, set[str]]:
        """The sessions of :attr:`unconfirmed` (or of ``believed``: session → (partition,
        applied seq)) Redis holds behind what the cache believed, partition → sessions, but
        those blocked: one pipelined read. Meaningful once every batch planned before the
        reset was applied again (the runtime's next batch settled)."""
        believed = self.unconfirmed if believed is None else believed
        sids = list(believed)
        if not sids:
            return {}
        meta, name = self.projection.keys.meta, self.projection.name
        replies = pipelined(
            self.client, [("HMGET", meta(name, sid), "applied", "blocked") for sid in sids]
        )
        out: dict[int, set[str]] = defaultdict(set)
        for sid, (applied, blocked) in zip(sids, replies, strict=True):
            partition, seq = believed[sid]
            if blocked is None and as_int(applied, -1) < seq:
                out[partition].add(sid)
        return dict(out)

    def reconnect(self) -> None:
        """In a forked process: Redis through connections of its own (redis-py's pool resets
        itself in a new process; the link's connection is the parent's)."""
        self.link = batch_io(self.client)
        self.cache.clear()
        self.unconfirmed.clear()

    def close(self) -> None:
        self.link.close()
