"""What a projector's session cache leaves behind when a failed batch resets it
(``SessionStore.reset``): the seq it believed each session applied, which the runtime compares
with Redis once Redis takes a batch again (a failover may have lost the last writes). No Redis:
the store's client never connects."""

from __future__ import annotations

from typing import Any

import redis

from projectors.keys import Keys
from projectors.runtime.sessions import Entry, SessionStore
from projectors.transcript import TranscriptProjection

PROJECTION = TranscriptProjection(Keys())


def entry(applied: int, partition: int, blocked: bool = False) -> Entry[Any]:
    """The state Redis would load at ``applied``."""
    return Entry(PROJECTION.load([str(applied).encode(), []]), blocked, partition=partition)


def store() -> SessionStore[Any]:
    return SessionStore(PROJECTION, redis.Redis(port=1), keep=10)


def test_a_reset_remembers_the_highest_seq_believed_of_each_session_that_can_be_rebuilt() -> None:
    s = store()
    s.cache["applied"] = entry(7, partition=0)
    # Its block may be lost with its last writes (behind() skips it if Redis still has it).
    s.cache["blocked"] = entry(3, partition=1, blocked=True)
    s.cache["new"] = Entry(PROJECTION.fresh(), partition=0)  # nothing applied to lose
    s.cache["no-partition"] = entry(5, partition=-1)  # rebuilt with no record: not read here
    s.reset()
    assert s.unconfirmed == {"applied": (0, 7), "blocked": (1, 3)}
    assert not s.cache
    # The batch fails again: what was read back since (from a Redis that lost the last
    # writes) is no news; a session seen since is.
    s.cache["applied"] = entry(4, partition=0)
    s.cache["seen-since"] = entry(2, partition=2)
    s.reset()
    assert s.unconfirmed == {"applied": (0, 7), "blocked": (1, 3), "seen-since": (2, 2)}


def test_a_revoked_partition_is_its_next_owners_to_mend() -> None:
    s = store()
    s.cache["kept"] = entry(7, partition=0)
    s.cache["revoked"] = entry(4, partition=2)
    s.reset()
    # Handed back: only this process knows it (Handover.moved, then pass_on).
    assert s.forget_partitions({2}) == {"revoked": (2, 4)}
    assert s.unconfirmed == {"kept": (0, 7)}


def test_a_forked_process_mends_nothing_of_its_parents() -> None:
    s = store()
    s.cache["applied"] = entry(7, partition=0)
    s.reset()
    s.reconnect()
    assert s.unconfirmed == {}


def test_sessions_of_the_failed_batch_are_left_out_their_records_go_again() -> None:
    """What the cache believes of them counts events Redis never acknowledged: applied again
    (here, or by their partition's next owner), a gap shows whatever a failover lost."""
    s = store()
    s.cache["quiet"] = entry(7, partition=0)
    s.cache["in-the-batch"] = entry(9, partition=2)
    s.reset(unacked={"in-the-batch"})
    assert s.unconfirmed == {"quiet": (0, 7)}
    assert s.forget_partitions({2}) == {}  # nothing for pass_on to hand on as lost
