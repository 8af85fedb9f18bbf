"""A failover's mend handed on through Redis, to whoever owns the partition next.

A failover may lose a quiet session's last writes while its offsets stay committed: the
projector that applied them finds it behind once Redis takes a batch again, and rebuilds it
(:meth:`.loop.Loop._mend_behind`). Should the partition go to another instance during that
rebuild (it is abandoned then), or the process die, nothing would ever show the next owner
that the session is behind. So the sessions found behind are written down first, in a set
per partition (:meth:`projectors.keys.Keys.mend`), and each leaves it once rebuilt. Whoever
is assigned the partition next reads the set and rebuilds what is still in it, and reads the
sets of the partitions it owns again every minute: an old owner that Redis kept away past
``max.poll.interval.ms`` writes its set after the partition moved (it learns of the move only
then), and the new owner would otherwise not see it before the partition's next assignment.
A rebuild from the topic is idempotent: one done twice (finished, but the process died before
saying so) costs a scan and nothing else.

A partition can also move while Redis is away, before its owner found anything behind: then
only the old owner knows what it had applied there. It keeps that (:meth:`Handover.moved`) and,
once Redis answers, writes the sessions Redis holds behind it into the partition's set
(:meth:`Handover.pass_on`), for the new owner's next re-read.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from projectors.batch_io import pipelined
from projectors.keys import Keys
from projectors.link import raise_errors
from projectors.runtime.sessions import SessionStore

# How often the sets of the partitions owned are read again: one round trip for all of them.
REREAD_EVERY_S = 60.0


class Handover:
    def __init__(self, name: str, keys: Keys, store: SessionStore[Any]) -> None:
        self.name = name
        self.keys = keys
        self.store = store  # its client and link, which a forked process replaces
        # Assigned since the last read: the rebalance callback only notes them, the loop
        # reads their sets at its next round, so a Redis error there is tried again.
        self._unread: set[int] = set()
        self._owed: dict[int, set[str]] = {}  # read, not rebuilt yet
        self._owned: set[int] = set()
        # Session → (partition, applied seq) believed before Redis failed, of partitions
        # revoked since: to pass on once Redis answers.
        self._moved: dict[str, tuple[int, int]] = {}
        self._not_before = 0.0  # after a failed take-over, its next try
        self._reread_at = time.monotonic() + REREAD_EVERY_S

    def assigned(self, partitions: Iterable[int]) -> None:
        partitions = set(partitions)
        self._owned.update(partitions)
        self._unread.update(partitions)

    def revoked(self, partitions: Collection[int]) -> None:
        """What is left of them is their next owner's to read."""
        self._owned.difference_update(partitions)
        self._unread.difference_update(partitions)
        for partition in partitions:
            self._owed.pop(partition, None)

    def moved(self, believed: Mapping[str, tuple[int, int]]) -> None:
        """What this process believed applied, when Redis failed, of sessions whose partitions
        it no longer owns (``SessionStore.forget_partitions``)."""
        for sid, (partition, seq) in believed.items():
            known = self._moved.get(sid)
            if known is None or known[1] < seq:
                self._moved[sid] = (partition, seq)

    def due(self) -> bool:
        """Something to pass on, to read (partitions assigned, or a minute since all owned
        were read) or to rebuild, and not right after a failed try: no I/O, asked every
        round."""
        now = time.monotonic()
        if now < self._not_before:
            return False
        if self._moved or self._unread or self._owed:
            return True
        return bool(self._owned) and now >= self._reread_at

    def drop_moved(self) -> dict[int, set[str]]:
        """Forget what :meth:`moved` kept, partition → sessions: the process is ending."""
        left: dict[int, set[str]] = {}
        for sid, (partition, _) in self._moved.items():
            left.setdefault(partition, set()).add(sid)
        self._moved.clear()
        return left

    def pass_on(self) -> dict[int, set[str]]:
        """Hand the sessions of :meth:`moved` that Redis holds behind on to their partitions'
        new owners (partition → sessions): a read of them all, and one write."""
        if not self._moved:
            return {}
        key = self.keys.mend
        # First a write that changes nothing: an old primary cut off from its replicas may
        # still answer reads with the writes a failover is about to lose, but refuses writes
        # if min-replicas-to-write is set (past min-replicas-max-lag), as a replica does.
        partitions = sorted({partition for partition, _ in self._moved.values()})
        pipelined(self.store.client, [("SREM", key(self.name, p), "") for p in partitions])
        behind = self.store.behind(self._moved)
        if behind:
            pipelined(self.store.client, self._additions(behind))
        self._moved.clear()
        return behind

    def postpone(self, delay_s: float) -> None:
        self._not_before = time.monotonic() + delay_s

    def owed(self) -> dict[int, set[str]]:
        """Partition → the sessions handed on to this process, not rebuilt yet: the sets of
        the partitions assigned since the last call are read, and every minute all those
        owned (one round trip)."""
        now = time.monotonic()
        # Only a read of them all moves the next one on: partitions assigned now and then
        # must not put off the re-read of those owned before them.
        every = now >= self._reread_at or self._owned <= self._unread
        unread = sorted(self._unread | self._owned if every else self._unread)
        if unread:
            key = self.keys.mend
            try:
                replies = pipelined(
                    self.store.client, [("SMEMBERS", key(self.name, p)) for p in unread]
                )
            except Exception:
                if every:  # the partitions assigned are tried again soon, the rest in a minute
                    self._reread_at = now + REREAD_EVERY_S
                raise
            for partition, members in zip(unread, replies, strict=True):
                if members:
                    self._owed.setdefault(partition, set()).update(map(_text, members))
            self._unread.difference_update(unread)
        if every:
            self._reread_at = now + REREAD_EVERY_S
        return {partition: set(sids) for partition, sids in self._owed.items()}

    def record(self, behind: Mapping[int, Collection[str]]) -> None:
        """Hand ``behind`` (partition → sessions) on, before their rebuild starts."""
        commands = self._additions(behind)
        if commands:
            raise_errors(self.store.link.round_trip(commands))

    def _additions(self, behind: Mapping[int, Collection[str]]) -> list[tuple[str, ...]]:
        key = self.keys.mend
        return [("SADD", key(self.name, p), *sorted(s)) for p, s in behind.items() if s]

    def settled(self, partition: int, sids: Collection[str]) -> None:
        """``sids`` of ``partition`` are rebuilt: no one owes them any more."""
        if not sids:
            return
        key = self.keys.mend(self.name, partition)
        raise_errors(self.store.link.round_trip([("SREM", key, *sorted(sids))]))
        owed = self._owed.get(partition)
        if owed is not None:
            owed.difference_update(sids)
            if not owed:
                del self._owed[partition]


def _text(member: bytes | str) -> str:
    return member.decode() if isinstance(member, bytes) else member
