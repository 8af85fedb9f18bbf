"""Which sessions of a partition the writer keeps in memory (``DSH_WRITER_MAX_RESIDENT_*``).

Sessions are kept in order of last use. Past the partition's share of the budget, the least
recently used ones are evicted after a batch: a session with events no snapshot covers is
snapshotted in that batch's transaction first, and it stays in memory (*leaving*) until that
transaction commits, so nothing is ever looked for on the topics before it is there. Then only
an :class:`Evicted` stub is left: where its latest snapshot and the events after it are, which
is all a command or a read needs to restore it (:mod:`.reload`). A transaction that fails drops
the partition's whole state anyway, stubs included, and the partition is restored.

No Kafka here: the reload is handed in. Every call on a command's path is O(1).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from producers.writer.state import SessionState


@dataclass(frozen=True)
class Evicted:
    """Where an evicted session is found again: the snapshots record of its latest snapshot
    (at or after ``snapshot_from``, with last seq ``snapshot_last``; ``snapshot_from`` None: no
    snapshot, the events topic holds all of it) and its events after that snapshot (at or
    after events offset ``events_from``), ``length`` events in all."""

    length: int
    invariants: bool | None  # None: as its snapshot says (evicted by a restore, never decoded)
    snapshot_from: int | None
    snapshot_last: int
    events_from: int
    size: int  # logged bytes, counted against the budget once it is back
    # Its snapshot was found too large (SessionState.oversized): not reloaded to try again.
    oversized: bool = False


@dataclass(frozen=True)
class Budget:
    """A partition's share of the writer's budget; 0: no limit of that kind."""

    sessions: int = 0
    bytes: int = 0

    @property
    def bounded(self) -> bool:
        return bool(self.sessions or self.bytes)

    def exceeded_by(self, sessions: int, size: int) -> bool:
        """Whether ``sessions`` sessions of ``size`` bytes in all are more than it allows."""
        return bool(
            (self.sessions and sessions > self.sessions) or (self.bytes and size > self.bytes)
        )

    def share(self, partitions: int) -> Budget:
        """This budget split evenly among ``partitions`` (at least one session each)."""
        n = max(partitions, 1)
        return Budget(
            -(-self.sessions // n) if self.sessions else 0,
            -(-self.bytes // n) if self.bytes else 0,
        )


Reload = Callable[[str, Evicted], "SessionState"]


@dataclass
class Residency:
    budget: Budget = field(default_factory=Budget)
    # Restores an evicted session from the topics (producers.writer.reload); None: none are.
    reload: Reload | None = None
    # Resident sessions by last use, oldest first: session id -> logged bytes.
    _used: OrderedDict[str, int] = field(default_factory=OrderedDict)
    resident_bytes: int = 0
    # Evicted in a transaction not yet committed: still in memory, back at once if asked for.
    leaving: dict[str, tuple[SessionState, Evicted]] = field(default_factory=dict)
    evicted: dict[str, Evicted] = field(default_factory=dict)
    # Sessions evicted by each transaction produced but not yet committed, oldest first.
    # Each eviction with its stub: a session taken back and evicted again in a later
    # transaction is leaving under that one's stub, and goes only when that one commits.
    _staged: list[list[tuple[str, Evicted]]] = field(default_factory=list)
    _pending: list[tuple[str, Evicted]] = field(default_factory=list)  # in the open transaction

    def __len__(self) -> int:
        return len(self._used)

    def used(self, session_id: str) -> None:
        """The session serves a command or a read now."""
        used = self._used
        if session_id in used:
            used.move_to_end(session_id)
        else:
            used[session_id] = 0

    def grew(self, session_id: str, size: int) -> None:
        """The session (resident) logged ``size`` more bytes."""
        self._used[session_id] += size
        self.resident_bytes += size

    def shrank(self, session_id: str, size: int) -> None:
        """Undo a :meth:`grew`: the bytes were not logged after all (the command was refused
        once encoded)."""
        self._used[session_id] -= size
        self.resident_bytes -= size

    def put_back(self, session_id: str, size: int) -> None:
        """Undo a :meth:`victims` yield: the session stays, still the least recently used."""
        self._used[session_id] = size
        self._used.move_to_end(session_id, last=False)
        self.resident_bytes += size

    def forget(self, session_id: str) -> None:
        self.resident_bytes -= self._used.pop(session_id, 0)

    def over(self) -> bool:
        return self.budget.exceeded_by(len(self._used), self.resident_bytes)

    def victims(self, keep: Collection[str] = ()) -> Iterator[tuple[str, int]]:
        """The least recently used sessions to evict, oldest first, with their logged bytes,
        until within budget; the most recently used one always stays, and so do those in
        ``keep``, where they are in the order. Each is forgotten as it is yielded."""
        used = self._used
        if not keep:
            while self.over() and len(used) > 1:
                session_id, size = used.popitem(last=False)
                self.resident_bytes -= size
                yield session_id, size
            return
        for session_id in [s for s in used if s not in keep]:
            if not self.over() or len(used) <= 1:
                return
            size = used.pop(session_id)
            self.resident_bytes -= size
            yield session_id, size

    # -- evicting, in step with the transactions -------------------------------------------

    def leave(self, session_id: str, state: SessionState, stub: Evicted) -> None:
        """Evict the session in the open transaction (its snapshot, if any, is in it)."""
        self.leaving[session_id] = (state, stub)
        self._pending.append((session_id, stub))

    def drop(self, session_id: str, stub: Evicted) -> None:
        """Evict a session whose state the topics already hold, committed (after a restore)."""
        self.evicted[session_id] = stub

    def stage(self) -> None:
        """The open transaction is produced: what it evicted goes once it commits. One call
        per transaction, to be followed by one :meth:`committed`."""
        self._staged.append(self._pending)
        self._pending = []

    def committed(self) -> None:
        """The oldest staged transaction committed: its evicted sessions leave memory."""
        for session_id, stub in self._staged.pop(0) if self._staged else ():
            left = self.leaving.get(session_id)
            # Else asked for again since: resident, or leaving again with a snapshot of a
            # later transaction, which a reload could not read until that one commits.
            if left is not None and left[1] is stub:
                del self.leaving[session_id]
                self.evicted[session_id] = stub

    def stub(self, session_id: str) -> Evicted | None:
        """Where the evicted (or leaving) session is found again; None if it is not evicted."""
        left = self.leaving.get(session_id)
        return left[1] if left is not None else self.evicted.get(session_id)

    def take_out(self, session_id: str) -> tuple[SessionState, Evicted] | None:
        """An evicted session's state, restored from the topics, and its stub, without making
        it resident: a restore evicts sessions whose events no snapshot covers, and one is
        taken out to be snapshotted and to :meth:`leave` again in the open transaction, which
        must follow. None if it is not evicted (or leaving: not committed yet)."""
        stub = self.evicted.get(session_id)
        if stub is None or self.reload is None:
            return None
        state = self.reload(session_id, stub)
        del self.evicted[session_id]
        return state, stub

    def take_back(self, session_id: str) -> SessionState | None:
        """The session's state if it was evicted (restored from the topics if need be), or
        None if this partition never had it."""
        back = self.leaving.pop(session_id, None) or self.take_out(session_id)
        if back is None:
            return None
        state, stub = back
        self.used(session_id)
        self.grew(session_id, stub.size)
        return state
