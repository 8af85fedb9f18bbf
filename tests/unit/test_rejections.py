"""The rejection memory of a partition (producers/writer/rejections.py) without Kafka: what a
transaction adds is kept only once it commits, the ring keeps the last ``slots`` slots, and a
restore rebuilds the same memory from the slot records, whatever their order."""

from __future__ import annotations

from dsh.errors import InvariantError
from producers.errors import ConflictError
from producers.writer.rejections import SLOT_ENTRIES, Rejections, Slot, slot_key


def _error(n: int) -> ConflictError:
    return ConflictError(f"session 's': expected seq {n}, but the next seq is 9")


def _commit(memory: Rejections, *rids: str) -> list[tuple[bytes, Slot]]:
    for rid in rids:
        memory.add("s", rid, _error(int(rid[1:])))
    staged = list(memory.stage())
    memory.committed()
    return staged


def test_a_rejection_counts_once_its_transaction_commits() -> None:
    memory = Rejections(slots=4)
    memory.add("s", "r1", InvariantError("no open turn", code="NO_OPEN_TURN"))
    found = memory.get("s", "r1")  # the same batch already answers a retry with it
    assert isinstance(found, InvariantError) and found.code == "NO_OPEN_TURN"
    assert len(memory) == 0
    [(key, slot)] = memory.stage()
    assert key == slot_key(0, 4) and slot.number == 0
    memory.committed()
    assert len(memory) == 1
    assert memory.get("other-session", "r1") is None  # request ids are per session


def test_the_ring_keeps_the_last_slots_and_a_restore_rebuilds_it() -> None:
    memory = Rejections(slots=2)
    records = []
    for n in range(3):
        records += _commit(memory, f"r{n}")
    assert memory.get("s", "r0") is None  # slot 0 was overwritten by slot 2
    assert [memory.get("s", f"r{n}") is not None for n in (1, 2)] == [True, True]
    restored = Rejections(slots=2)
    restored.load(reversed([slot for _, slot in records]), {})
    assert restored.get("s", "r0") is None
    again, before = restored.get("s", "r2"), memory.get("s", "r2")
    assert again is not None and before is not None
    assert (type(again), again.code, again.message) == (type(before), before.code, before.message)
    # The next slot continues the numbering, so it overwrites the oldest one (r1's).
    _commit(restored, "r3")
    assert restored.get("s", "r1") is None and restored.get("s", "r3") is not None


def test_a_request_committed_since_is_not_restored_as_rejected() -> None:
    memory = Rejections(slots=8)
    records = _commit(memory, "r1", "r2")
    restored = Rejections(slots=8)
    restored.load([slot for _, slot in records], {"s": ["r1"]})
    assert restored.get("s", "r1") is None and restored.get("s", "r2") is not None


def test_a_big_batch_of_rejections_fills_several_slots() -> None:
    memory = Rejections(slots=8)
    records = _commit(memory, *(f"r{n}" for n in range(SLOT_ENTRIES + 1)))
    assert [slot.number for _, slot in records] == [0, 1]
    assert len(memory) == SLOT_ENTRIES + 1
    slot = Slot.from_state(records[1][1].state())
    assert slot.number == 1 and list(slot.entries) == [("s", f"r{SLOT_ENTRIES}")]


def test_a_transaction_staged_while_the_one_before_commits_numbers_its_slots_after_it() -> None:
    # The writer produces transaction N+1 while N commits: N+1's slots come after N's, a
    # retry in N+1 already finds N's rejection, and each commit keeps only its own slots.
    memory = Rejections(slots=8)
    memory.add("s", "r1", _error(1))
    [(_, first)] = memory.stage()
    memory.add("s", "r2", _error(2))
    assert memory.get("s", "r1") is not None  # staged, not committed yet
    [(_, second)] = memory.stage()
    assert (first.number, second.number) == (0, 1)
    memory.committed()  # N
    assert len(memory) == 1 and memory.get("s", "r2") is not None
    memory.committed()  # N+1
    assert len(memory) == 2
    memory.add("s", "r3", _error(3))
    [(key, third)] = memory.stage()
    assert third.number == 2 and key == slot_key(2, 8)
