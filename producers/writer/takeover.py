"""Taking partitions over from a writer that left a transaction open.

A writer's transaction holds the command offsets it sent (KIP-447) until it ends, and the next
owner of those partitions must read stable offsets before it restores them. When the previous
owner crashed or hangs, its transaction ends only once its coordinator aborts it: after the
transaction timeout, at the broker's next check for timed-out transactions (every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s by default). With the
writer's 30 s timeout the partitions stood still for up to 40 s.

The new owner can end it sooner: a producer that initialises the same transactional id fences
the old one and has its open transaction aborted at once. Every transaction therefore names
its writer in the metadata of the offsets it commits, and a writer whose assignment waits
too long reads that metadata (without waiting: read_uncommitted does not ask for stable
offsets) and fences the writers named there, except itself and any writer still in the group:
a live member's transaction ends by itself, and fencing it would cost it a recovery.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from producers.writer import metrics
from servicekit import kafka_clients
from servicekit.kafka_clients import partition_ids
from servicekit.settings import KafkaSettings

log = logging.getLogger("dsh.writer")

# Kafka keeps offset metadata up to offset.metadata.max.bytes (4 KiB by default).
_MAX_METADATA = 4096


def lane_id(writer_id: str, lane: int) -> str:
    """The transactional id of a writer's producer ``lane`` (two with commit overlap)."""
    return writer_id if lane == 0 else f"{writer_id}-{lane}"


def offsets_metadata(writer_id: str, lanes: int) -> str:
    """What a writer's transactions store with the offsets they commit."""
    text = json.dumps({"writer": writer_id, "lanes": lanes}, separators=(",", ":"))
    return text if len(text.encode()) <= _MAX_METADATA else ""


def parse_offsets_metadata(text: str | None) -> tuple[str, int] | None:
    """(writer id, lanes) from :func:`offsets_metadata`; None for anything else (offsets
    committed before writers named themselves, or by another tool)."""
    try:
        found = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    writer, lanes = found.get("writer"), found.get("lanes")
    if not isinstance(writer, str) or not writer or type(lanes) is not int or not 1 <= lanes <= 8:
        return None
    return writer, lanes


def last_committers(peek: Consumer, partitions: Sequence[TopicPartition]) -> set[tuple[str, int]]:
    """The writers that committed the partitions' current offsets, read without waiting for
    open transactions (``peek`` is read_uncommitted, in the writers' group, never joined)."""
    found = set()
    for tp in peek.committed(list(partitions), 10.0):
        owner = parse_offsets_metadata(tp.metadata)
        if owner is not None:
            found.add(owner)
    return found


def live_members(kafka: KafkaSettings, group_id: str) -> set[str]:
    """Client ids of the group's current members (a writer's client id is its writer id)."""
    admin = kafka_clients.admin(kafka)
    description = admin.describe_consumer_groups([group_id], request_timeout=10)[group_id]
    return {m.client_id for m in description.result(timeout=15).members}


def fence(kafka: KafkaSettings, transactional_id: str, transaction_timeout_ms: int) -> None:
    """Initialise ``transactional_id`` once: the coordinator aborts its open transaction and
    bumps its epoch, so the producer that held it can publish nothing more."""
    producer = kafka_clients.producer(
        kafka,
        **{"transactional.id": transactional_id, "transaction.timeout.ms": transaction_timeout_ms},
    )
    try:
        producer.init_transactions(30.0)
    finally:
        producer.close()


def fence_stuck_owners(
    kafka: KafkaSettings,
    group_id: str,
    own_id: str,
    peek: Consumer,
    partitions: Sequence[TopicPartition],
    transaction_timeout_ms: int,
) -> list[str]:
    """Fences the writers that last committed ``partitions`` and are no longer in the group;
    returns the transactional ids fenced. Errors are logged: the caller then waits for the
    transactions to time out, as it would have anyway."""
    try:
        owners = {o for o in last_committers(peek, partitions) if o[0] != own_id}
        if not owners:
            return []
        alive = live_members(kafka, group_id)
    except (KafkaException, TimeoutError) as exc:
        # TimeoutError: the group description's future, while a coordinator moves. Raised out
        # of here it would end the writer from inside its assignment callback.
        log.warning(
            "could not tell who holds the offsets of %s: %s", partition_ids(partitions), exc
        )
        return []
    fenced: list[str] = []
    for writer_id, lanes in sorted(owners):
        if writer_id in alive:
            continue  # its transaction ends by itself
        for lane in range(lanes):
            tid = lane_id(writer_id, lane)
            try:
                fence(kafka, tid, transaction_timeout_ms)
            except KafkaException as exc:
                log.warning("could not fence %s: %s", tid, exc)
                continue
            metrics.OWNERS_FENCED.inc()
            fenced.append(tid)
    if fenced:
        log.warning(
            "fenced %s, which left the group with a transaction holding the offsets of "
            "partitions %s: it is aborted now, not at its timeout",
            ", ".join(fenced),
            partition_ids(partitions),
        )
    return fenced
