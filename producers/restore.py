"""Reading a partition of the events topic back into writer state (and a session for clients).

Reads are ``read_committed`` and go on until the position reaches the *high watermark* read at
the start (not the last stable offset): a transaction that a dead or paused owner left open
holds the position below it until that transaction commits or is aborted, so a new owner
never serves from a log that may still grow behind its back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

import dsh
from deploy.config import KafkaSettings
from deploy.topics import fetched
from dsh.errors import SessionError
from producers.rejections import DEFAULT_SLOTS, Rejections, Slot, is_slot_key
from producers.state import (
    PartitionState,
    SessionState,
    rebuild,
    requests_from_log,
    reusable_value,
    without_traceback,
)
from schemas import WriterSnapshot, decode_event_frozen, decode_snapshot

REQUEST_HEADER = "dsh-request-id"


class RestoreTimeoutError(SessionError):
    default_code = "RESTORE_TIMEOUT"


def reader_consumer(
    kafka: KafkaSettings, isolation: str = "read_committed", topics: Sequence[str] = ()
) -> Consumer:
    """A consumer for explicit assignments only (it never joins its group), with the metadata
    of ``topics`` fetched up front: librdkafka asks for an assigned topic it does not know
    only at its next periodic scan, then retries the start offset on a 500 ms timer, so the
    first read of each topic took 0.5-1.5 s instead of milliseconds."""
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": "dsh-reader-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    for topic in topics:
        refresh_metadata(consumer, topic)
    return consumer


def high_watermark(probe: Consumer, topic: str, partition: int, timeout_s: float = 10.0) -> int:
    # The probe is read_uncommitted: a read_committed consumer would report the last stable
    # offset, which stops short of open transactions.
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, high = probe.get_watermark_offsets(TopicPartition(topic, partition), 5.0, False)
            return int(high)
        except KafkaException as exc:
            # Leadership moves (a new topic, a broker restart) pass: ask again until the deadline.
            if time.monotonic() > deadline:
                raise
            if exc.args[0].code() == KafkaError._UNKNOWN_PARTITION:
                # librdkafka answers this from its metadata cache without asking again, and
                # a broker that has just restarted can describe the topic with partitions
                # missing: that answer would stay cached for metadata.max.age.ms (15 min).
                # Asking for the topic's metadata replaces the cached entry.
                refresh_metadata(probe, topic)
            time.sleep(0.1)


def refresh_metadata(client: Consumer, topic: str) -> None:
    with contextlib.suppress(KafkaException):  # the caller's own retry reports what is wrong
        client.list_topics(topic, timeout=5.0)


def read_partition(
    consumer: Consumer, topic: str, partition: int, end: int, timeout_s: float, start: int = 0
) -> Iterator[Message]:
    """Every committed record of the partition from offset ``start`` up to ``end``."""
    if start >= end:
        return
    tp = TopicPartition(topic, partition, start if start > 0 else OFFSET_BEGINNING)
    consumer.assign([tp])
    deadline = time.monotonic() + timeout_s
    try:
        position = start
        while position < end:
            if time.monotonic() > deadline:
                raise RestoreTimeoutError(
                    f"{topic}[{partition}]: stuck at offset {position} of {end} for "
                    f"{timeout_s:.0f}s (a transaction left open?)"
                )
            for message in fetched(consumer, 500, 0.2):
                err = message.error()
                if err is None:
                    if message.offset() < end:  # type: ignore[operator]
                        yield message
                elif err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
            # Past aborted records and transaction markers, which are never returned.
            pos = consumer.position([TopicPartition(topic, partition)])[0]
            position = max(position, pos.offset)
    finally:
        consumer.unassign()


def header(message: Message, name: str) -> str | None:
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    for key, value in pairs:
        if key == name and value is not None:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


CHECKPOINT_KEY = b"\x00checkpoint"


def checkpoint_offset(snapshot: WriterSnapshot) -> int:
    state = snapshot.state if isinstance(snapshot.state, dict) else {}
    return int(state.get("eventsOffset", 0))


def restore_partition(
    reader: Consumer,
    probe: Consumer,
    topics: tuple[str, str],
    partition: int,
    timeout_s: float,
    *,
    use_snapshots: bool = True,
    rejection_slots: int = DEFAULT_SLOTS,
    _slots: list[Slot] | None = None,
) -> PartitionState:
    """Sessions of the partition from their latest snapshots plus the events after the last
    checkpoint. A checkpoint at events offset X promises that every session with an event
    below X has a snapshot covering those events, so the events topic is read from X only.
    The remembered rejections come from the same topic (``producers.rejections``)."""
    events_topic, snapshots_topic = topics
    snapshots: dict[str, WriterSnapshot] = {}
    slots: list[Slot] = [] if _slots is None else _slots
    start = 0
    if use_snapshots:
        end = high_watermark(probe, snapshots_topic, partition)
        # Until compaction gets to them (not before their segment rolls), every snapshot a
        # session ever had is still there, each holding all its events up to then: only the
        # last record of each key is decoded, or a restore would decode a session's events
        # once per snapshot of it.
        last_of_key: dict[bytes | None, Message] = {}
        for message in read_partition(reader, snapshots_topic, partition, end, timeout_s):
            if is_slot_key(message.key()):
                slots.append(Slot.from_state(decode_snapshot(message.value() or b"").state))
            else:
                last_of_key[message.key()] = message
        checkpoint = last_of_key.pop(CHECKPOINT_KEY, None)
        if checkpoint is not None:
            start = checkpoint_offset(decode_snapshot(checkpoint.value() or b""))
        for message in last_of_key.values():
            snapshot = decode_snapshot(message.value() or b"")
            snapshots[snapshot.session_id] = snapshot
    end = high_watermark(probe, events_topic, partition)
    logs: dict[str, list[dict[str, Any]]] = {}
    values: dict[str, list[bytes | None]] = {}
    request_ids: dict[str, list[str | None]] = {}
    state = PartitionState(partition, restored_from=start, rejections=Rejections(rejection_slots))
    for message in read_partition(reader, events_topic, partition, end, timeout_s, start):
        try:
            record = decode_event_frozen(message.value() or b"")
        except SessionError as exc:
            key = (message.key() or b"").decode(errors="replace")
            state.broken[key] = without_traceback(exc)
            continue
        covered = snapshots.get(record.session_id)
        if covered is not None and record.event["seq"] <= covered.last_seq:
            continue  # already in the snapshot
        logs.setdefault(record.session_id, []).append(record.event)
        values.setdefault(record.session_id, []).append(reusable_value(message.value()))
        request_ids.setdefault(record.session_id, []).append(header(message, REQUEST_HEADER))
    for session_id in snapshots.keys() | logs.keys():
        if session_id in state.broken:
            continue
        latest = snapshots.get(session_id)
        head = list(latest.events) if latest is not None else []
        tail = logs.get(session_id, [])
        if use_snapshots and tail and tail[0]["seq"] != len(head):
            # A gap between snapshot and tail breaks the checkpoint's promise: trust only the
            # events topic, from its beginning.
            return restore_partition(
                reader,
                probe,
                topics,
                partition,
                timeout_s,
                use_snapshots=False,
                rejection_slots=rejection_slots,
                _slots=slots,
            )
        try:
            session = rebuild(session_id, head + tail)
        except SessionError as exc:
            state.broken[session_id] = without_traceback(exc)
            continue
        requests = (
            {r.request_id: (r.first_seq, r.count) for r in latest.requests}
            if latest is not None
            else {}
        )
        requests.update(requests_from_log(request_ids.get(session_id, []), len(head)))
        known: list[bytes | None] = [None] * len(head)
        known += values.get(session_id, [])
        state.sessions[session_id] = SessionState(session, requests, {}, len(tail), known)
        if tail:
            state.dirty.add(session_id)  # the next checkpoint must cover its tail
    state.rejections.load(slots, {sid: s.requests for sid, s in state.sessions.items()})
    return state


def read_session(
    reader: Consumer, events_topic: str, partition: int, session_id: str, timeout_s: float
) -> dsh.Session:
    """The session as committed now: its partition up to the last stable offset."""
    end = high_watermark(reader, events_topic, partition, timeout_s)  # read_committed: the LSO
    key = session_id.encode()
    events = [
        decode_event_frozen(m.value() or b"").event
        for m in read_partition(reader, events_topic, partition, int(end), timeout_s)
        if m.key() == key
    ]
    return rebuild(session_id, events)
