"""What a partition's writer remembers of the requests it rejected, so that a retried request
gets its original rejection instead of being validated again (rejections are not events, so
the log alone cannot answer it). No Kafka here.

The memory is a ring of ``slots`` on the compacted snapshots topic, written in the same
transaction as the rejection replies: each transaction that rejected anything fills one or
more slots of at most :data:`SLOT_ENTRIES` rejections, slot ``n`` under the key
``\\x00rejected/<n mod slots>``. In memory the writer holds exactly the slots that are
committed, so a writer that restores the partition (restart, takeover, recovery after an abort)
remembers exactly what the one before it did. A rejection leaves the memory when its slot is
overwritten, ``slots`` slots later; a retry after that is validated again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.errors import SessionError, error_from_wire

SLOT_ENTRIES = 64  # rejections per slot: keeps one record small (a few tens of KB at most)
DEFAULT_SLOTS = 1024
KEY_PREFIX = b"\x00rejected/"

Key = tuple[str, str]  # (session id, request id): request ids are unique per session


@dataclass
class Slot:
    number: int  # how many slots the partition had written before this one
    entries: dict[Key, dict[str, Any]]  # -> SessionError.to_wire()

    def state(self) -> dict[str, Any]:
        """The slot as the ``state`` JSON of a writer snapshot record."""
        return {
            "rejectedSlot": self.number,
            "rejected": [[sid, rid, wire] for (sid, rid), wire in self.entries.items()],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Slot:
        entries = {(str(sid), str(rid)): dict(wire) for sid, rid, wire in state["rejected"]}
        return cls(int(state["rejectedSlot"]), entries)


def slot_key(number: int, slots: int) -> bytes:
    return KEY_PREFIX + str(number % slots).encode()


def is_slot_key(key: bytes | None) -> bool:
    return key is not None and key.startswith(KEY_PREFIX)


@dataclass
class Rejections:
    slots: int = DEFAULT_SLOTS  # 0: remember nothing
    _ring: dict[int, Slot] = field(default_factory=dict)  # slot index -> committed slot
    _index: dict[Key, int] = field(default_factory=dict)  # -> slot index holding it
    _written: int = 0  # slots committed so far (the next slot's number)
    _pending: dict[Key, dict[str, Any]] = field(default_factory=dict)  # the open transaction's
    # Staged slots of transactions produced but not yet committed, oldest first (the writer
    # may produce one transaction while the one before it commits).
    _staged: list[list[Slot]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self._index)

    def get(self, session_id: str, request_id: str) -> SessionError | None:
        key = (session_id, request_id)
        wire = self._pending.get(key)
        if wire is None:
            wire = next((s.entries[key] for g in self._staged for s in g if key in s.entries), None)
        if wire is None:
            at = self._index.get(key)
            if at is None:
                return None
            wire = self._ring[at].entries[key]
        return error_from_wire(wire)

    def add(self, session_id: str, request_id: str, error: SessionError) -> None:
        """Remember a rejection of the open transaction (kept once it commits)."""
        if self.slots:
            self._pending[(session_id, request_id)] = error.to_wire()

    def stage(self) -> list[tuple[bytes, Slot]]:
        """The slot records to produce in the open transaction: its rejections, in slots.
        Every call stages one transaction, to be followed by one :meth:`committed`."""
        items = list(self._pending.items())
        self._pending = {}
        first = self._written + sum(len(g) for g in self._staged)
        staged = [
            Slot(first + n, dict(items[i : i + SLOT_ENTRIES]))
            for n, i in enumerate(range(0, len(items), SLOT_ENTRIES))
        ]
        self._staged.append(staged)
        return [(slot_key(slot.number, self.slots), slot) for slot in staged]

    def committed(self) -> None:
        """The oldest staged transaction committed: its slots are the memory now."""
        for slot in self._staged.pop(0) if self._staged else ():
            self._put(slot)

    def load(self, slots: Iterable[Slot], committed: Mapping[str, Iterable[str]]) -> None:
        """The ring as restored from the snapshots topic (any order, a key's later records
        replacing its earlier ones). ``committed`` maps a session to its committed request ids:
        a request evicted from memory, retried and then committed is no longer a rejection."""
        if not self.slots:
            return
        latest: dict[int, Slot] = {}
        for slot in slots:
            at = slot.number % self.slots
            if at not in latest or latest[at].number < slot.number:
                latest[at] = slot
        done = {sid: set(rids) for sid, rids in committed.items()}
        for slot in sorted(latest.values(), key=lambda s: s.number):
            slot.entries = {k: w for k, w in slot.entries.items() if k[1] not in done.get(k[0], ())}
            self._put(slot)

    def _put(self, slot: Slot) -> None:
        at = slot.number % self.slots
        old = self._ring.get(at)
        if old is not None:
            for key in old.entries:
                if self._index.get(key) == at:
                    del self._index[key]
        self._ring[at] = slot
        for key in slot.entries:
            self._index[key] = at
        self._written = max(self._written, slot.number + 1)
