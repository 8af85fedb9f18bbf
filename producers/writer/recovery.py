"""What the writer does when a transaction fails: decisions on Kafka's error codes, with no
client in sight (``tests/unit/test_writer_recovery.py`` tables them). The writer
(:mod:`producers.writer.service`) carries them out.

The rule: never serve from state the log lacks. A failed transaction either stops the writer
(it is fenced for real), or is produced again (only the group's generation moved, so what was
validated still holds), or every owned partition is restored from the log.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka import KafkaError

# The transactional id's epoch moved past this producer: a newer producer with the same id
# took it over, or the coordinator aborted our transaction for running past
# transaction.timeout.ms (e.g. while a broker was down), which bumps the epoch too.
_EPOCH_BUMPED = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FATAL,  # a fatal error whose cause was not passed on: assume the worst
    }
)
_NOT_ALLOWED = frozenset(
    {KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}
)
# The group coordinator refused the transaction's offsets only because the group's generation
# moved on since they were sent (a rebalance began or completed meanwhile).
_GENERATION_MOVED = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS})

# A commit is tried this many times while librdkafka calls its failure retriable.
COMMIT_ATTEMPTS = 3
# New producers in a row with no committed transaction between them before the writer gives
# up and exits (an error that a new producer does not cure; the supervisor takes over).
MAX_REPLACEMENTS = 5


class Verdict(enum.Enum):
    STOP = "stop"  # fenced for real: exit, to be restarted as a fresh member
    PRODUCE_AGAIN = "produce again"  # the same records and offsets, with the new generation
    RESTORE = "restore"  # drop every partition's state, restore it, rewind the commands


class Ending(enum.Enum):
    ABORT = "abort"
    REPLACE = "replace"  # a new producer with the same transactional id ends it


def fenced(err: KafkaError, *, shared_id: bool) -> bool:
    """Whether a producer error must stop the writer. A new producer cures every fatal error
    except these: being refused the id, and a moved epoch when another process may hold the
    id (a configured transactional id) — taking it back would fence the newer owner. An id of
    this process's own (the default) nobody else has, so a moved epoch there only means the
    coordinator ended our timed-out transaction."""
    code = err.code()
    return code in _NOT_ALLOWED or (shared_id and code in _EPOCH_BUMPED)


def stale_generation(err: KafkaError) -> bool:
    return err.code() in _GENERATION_MOVED and not err.fatal()


def verdict(failures: Iterable[KafkaError], *, shared_id: bool) -> Verdict:
    """What to do about the failed transactions (the open one and the one committing).

    A transaction refused only because the group's generation moved on (a writer joined or
    left while it committed; every rebalance does it to some transaction in flight) is
    produced again, records and offsets, with the new generation: what was validated still
    holds, since nobody else writes the partitions this writer still owns. If that fails too,
    the writer restores."""
    errors = list(failures)
    if any(fenced(err, shared_id=shared_id) for err in errors):
        return Verdict.STOP
    if errors and all(stale_generation(err) for err in errors):
        return Verdict.PRODUCE_AGAIN
    return Verdict.RESTORE


def ending(err: KafkaError | None) -> Ending:
    """How to end a lane's failed (``err``) or abandoned (None) transaction.

    A fatal error leaves a producer that cannot go on. A timed-out one means the coordinator
    did not answer in time (it is moving, or gone): by the time it does, it has often aborted
    the transaction for its own timeout, and an abort then blocks and fails fatally with
    INVALID_TXN_STATE (librdkafka #3297; 6 s in the broker-kill runs). A new producer's
    ``init_transactions`` ends the transaction either way, as soon as a coordinator answers,
    and bumps the epoch, so the old producer is fenced for good."""
    if err is not None and (err.fatal() or err.code() == KafkaError._TIMED_OUT):
        return Ending.REPLACE
    return Ending.ABORT


def retry_commit(err: KafkaError, attempt: int) -> bool:
    """Whether a failed ``commit_transaction`` (attempt 0, 1, …) is tried again."""
    return err.retriable() and attempt + 1 < COMMIT_ATTEMPTS


def still_served(
    failed: Sequence[Mapping[int, object]], partitions: Mapping[int, object]
) -> set[int]:
    """The partitions of the failed transactions (each given as the in-memory state, by
    partition, its commands were applied to) that are still served from that very state: only
    their records may be produced again. A partition revoked, lost or restored since (a new
    state, read from the log without them) is left to the log."""
    touched = {p for states in failed for p in states}
    return {
        p
        for p in touched
        if all(partitions.get(p) is states[p] for states in failed if p in states)
    }


def unfenced(group_metadata: object) -> bool:
    """True for group metadata the broker would not check: a member that lost its membership
    (generation -1, no member id) looks like a pre-KIP-447 producer, whose transactional
    offsets the coordinator accepts as they are. Reads librdkafka's serialized form
    ("CGMDv2:", native int32 generation, group id NUL, member id NUL, ...)."""
    if not (isinstance(group_metadata, bytes) and group_metadata.startswith(b"CGMDv2:")):
        return False  # a form we do not know: the broker's own checks still apply
    generation = int.from_bytes(group_metadata[7:11], sys.byteorder, signed=True)
    fields = group_metadata[11:].split(b"\0")
    member = fields[1] if len(fields) > 1 else b""
    return generation < 0 or not member
