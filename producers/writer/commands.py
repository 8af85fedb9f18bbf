"""One command in, its outcome and records out: the writer's decisions, with no Kafka client.

For each command record the :class:`CommandHandler` decodes it (undecodable: a dead letter),
checks where it came from (key, partition, tenant), answers a retry from the log or from the
remembered rejection, applies it to the partition's in-memory sessions (the core validates),
and puts the events, the reply and any snapshot into the open transaction's
:class:`~producers.writer.journal.Outbox`. The writer keeps the change only once that
transaction commits; otherwise it restores the partition from the log.
``tests/unit/test_writer_commands.py`` tables it against a list outbox.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dsh.errors import SessionError
from dsh.restore import END_SEED
from producers.errors import MalformedCommandError, PayloadTooLargeError, WrongPartitionError
from producers.tenancy import Tenancy
from producers.writer import metrics
from producers.writer.failpoints import NONE, Failpoints
from producers.writer.journal import REPLY, Headers, Outbox, headers_of
from producers.writer.snapshots import Snapshots
from producers.writer.state import Limits, Outcome, PartitionState, SessionState
from producers.writer.wire import committed_reply, event_wire
from schemas import (
    HEADER_INHERITED,
    HEADER_READ_FROM,
    HEADER_READ_NEXT,
    AppendCommand,
    AppendReply,
    encode_event,
    encode_reply,
    header,
    invariants_header,
    invariants_of,
)
from schemas.frames import DraftFrame, decode_command_frames, event_prefix, event_value
from servicekit.dlq import dead_letter_headers, source_of
from servicekit.kafka_clients import MAX_RECORD_BYTES
from servicekit.partitioning import partition_for
from servicekit.topics import Topics

log = logging.getLogger("dsh.writer")

# A read's reply holds events up to this many bytes (always one); the client asks again from
# the seq the reply names. Well under the broker's 1 MB default record limit.
READ_REPLY_BYTES = 512 * 1024
# An append's reply carries every event it committed: the events of one command fit in one
# record with room to spare for the reply's ids and headers.
APPEND_REPLY_BYTES = MAX_RECORD_BYTES - 16 * 1024
# Request ids are kept in memory and in snapshots, and quoted in replies: bounded, so that no
# reply (a rejection quotes its id) outgrows a record.
MAX_REQUEST_ID_CHARS = 512


def _quoted(request_id: str) -> str:
    """The request id for a message: whole, unless it is over the limit."""
    if len(request_id) <= MAX_REQUEST_ID_CHARS:
        return repr(request_id)
    return f"{request_id[:40]!r}…"


def _inherited(events: Sequence[Any]) -> int:
    """How many of a session's first events a fork inherited from its parent: those before
    its ``session/end-seed`` marker with ``{"inherited": true}`` (``Session.fork``), which
    comes in the fork's first command; 0 for any other session."""
    for i, ev in enumerate(events):
        if ev.type == END_SEED and isinstance(ev.data, Mapping) and ev.data.get("inherited"):
            return i
    return 0


def _read_part(held: SessionState, start: int) -> tuple[list[bytes], int | None]:
    """The topic values of ``held``'s events from ``start``, at most :data:`READ_REPLY_BYTES`
    of them (always one), and the seq to go on from (None: that was all)."""
    values: list[bytes] = []
    size = 0
    for seq in range(start, len(held.session)):
        (value,) = held.event_values(seq, seq + 1)
        if values and size + len(value) > READ_REPLY_BYTES:
            return values, seq
        values.append(value)
        size += len(value)
    return values, None


def event_headers_of(
    event_type: str, request_id: bytes, inherited: bool, bare: bool = False
) -> Headers:
    """An event's headers, with ``dsh-inherited: 1`` when a fork copied it from its parent (so
    a count over the topic can leave it out), and ``dsh-invariants: off`` on the first event
    of a session created without the turn invariants (restores read its mode there)."""
    headers = headers_of(event_type, request_id)
    if inherited:
        headers.append((HEADER_INHERITED, b"1"))
    if bare:
        headers.append(invariants_header(False))
    return headers


class CommandRecord(Protocol):
    """What the handler reads of a command's record (a ``confluent_kafka.Message`` is one)."""

    def value(self) -> bytes | None: ...
    def key(self) -> bytes | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def headers(self) -> Any: ...


@dataclass(frozen=True)
class Placement:
    """Partition counts of the commands (= events, snapshots) topic and of the replies topic."""

    partitions: int
    reply_partitions: int


class CommandHandler:
    def __init__(
        self,
        topics: Topics,
        placement: Placement,
        limits: Limits,
        snapshots: Snapshots,
        tenancy: Tenancy | None = None,
        failpoints: Failpoints = NONE,
    ) -> None:
        self.topics = topics
        self.placement = placement
        self.limits = limits
        self.snapshots = snapshots
        self.tenancy = tenancy or Tenancy()
        self.failpoints = failpoints
        # murmur2 in Python costs more than the rest of routing a command; ids repeat a lot.
        self._partition_of = functools.lru_cache(maxsize=1 << 16)(partition_for)

    def handle(self, record: CommandRecord, state: PartitionState, outbox: Outbox) -> None:
        """Decide one command of ``state``'s partition and put what it publishes in
        ``outbox``."""
        value = record.value() or b""
        try:
            command, frames = decode_command_frames(value)
        except SessionError as exc:
            self._dead_letter(record, exc, outbox)
            return
        if not command.events:
            read_from = header(record.headers(), HEADER_READ_FROM)
            if read_from is not None:
                self._read(record, command, state, read_from, outbox)
                return
        try:
            invariants = invariants_of(record.headers())
        except ValueError as exc:
            error = MalformedCommandError(f"request {_quoted(command.request_id)}: {exc}")
            outcome = Outcome(error=error)
        else:
            outcome = self._decide(record, command, state, len(value), invariants)
        self.failpoints.command(command.request_id)
        sid = command.session_id
        values: list[bytes] = []
        if outcome.new:
            session_state = state.sessions[sid]
            if frames is not None and session_state.prefix is None:
                session_state.prefix = event_prefix(sid)
            values = self._event_values(command, frames, outcome, session_state.prefix)
            too_large = self._too_large(command, outcome, values)
            if too_large is not None:
                state.undo(command, outcome)
                values = []
                outcome = Outcome(error=too_large)
                state.rejections.add(sid, command.request_id, too_large)
            else:
                session_state.values.extend(values)
                put, events, key = outbox.put, self.topics.events, sid.encode()
                p = state.partition
                request_id = command.request_id.encode()
                creates = outcome.events[0].seq == 0
                inherited = _inherited(outcome.events) if creates else 0
                bare = creates and not session_state.session.invariants
                marked = max(inherited, int(bare))  # leading events with headers of their own
                for i, (ev, v) in enumerate(zip(outcome.events, values, strict=True)):
                    if i < marked:
                        kind = event_headers_of(ev.type, request_id, i < inherited, bare and i == 0)
                        put(p, events, v, key, p, kind)
                    else:
                        put(p, events, v, key, p, ev.type, request_id)
                self.snapshots.after_command(state, sid, outbox)
        elif outcome.error is None and outcome.events:  # a retry, answered from the log
            first = outcome.events[0].seq
            values = state.sessions[sid].event_values(first, first + len(outcome.events))
        self._reply(state.partition, command, outcome, values, outbox)

    def _too_large(
        self, command: AppendCommand, outcome: Outcome, values: list[bytes]
    ) -> PayloadTooLargeError | None:
        """Why the events a command made cannot be published: one over the event limit, or
        all of them together over what its reply can carry (many small events whose copies
        of the session id and envelope outgrow the command; unanswerable, the command would
        fail its transaction again on every retry)."""
        limit = self.limits.max_event_bytes
        for ev, v in zip(outcome.events, values, strict=True):
            if len(v) > limit:
                return PayloadTooLargeError(
                    f"request {command.request_id!r}: event {ev.type} would be {len(v)} "
                    f"bytes, the limit is {limit}",
                    code="EVENT_TOO_LARGE",
                )
        total = sum(map(len, values))
        if total > APPEND_REPLY_BYTES:
            return PayloadTooLargeError(
                f"request {command.request_id!r}: its {len(values)} events would be {total} "
                f"bytes together, more than the {APPEND_REPLY_BYTES} one reply carries; "
                "append them in smaller commands",
                code="COMMAND_TOO_LARGE",
            )
        return None

    def _refusal(self, record: CommandRecord, command: AppendCommand) -> SessionError | None:
        """Why a command may not touch its session, whatever it asks: its request id's length
        (checked first: the other refusals quote it), its key, its partition, its tenant."""
        if len(command.request_id) > MAX_REQUEST_ID_CHARS:
            return MalformedCommandError(
                f"request {_quoted(command.request_id)}: a request id is at most "
                f"{MAX_REQUEST_ID_CHARS} characters, this one is {len(command.request_id)}"
            )
        if record.key() != command.session_id.encode():
            return MalformedCommandError(
                f"request {command.request_id!r}: record key {record.key()!r} is not the "
                f"session id {command.session_id!r}"
            )
        home = self._partition_of(command.session_id, self.placement.partitions)
        if home != record.partition():
            return WrongPartitionError(
                f"request {command.request_id!r}: session {command.session_id!r} lives on "
                f"partition {home}, the command came on {record.partition()}; produce "
                "commands with Kafka's default (murmur2) partitioner"
            )
        if self.tenancy.enabled:
            return self.tenancy.check(
                record.headers(), command.request_id, command.session_id, record.value() or b""
            )
        return None

    def _decide(
        self,
        record: CommandRecord,
        command: AppendCommand,
        state: PartitionState,
        size: int,
        invariants: bool | None,
    ) -> Outcome:
        refused = self._refusal(record, command)
        if refused is not None:
            return Outcome(error=refused)
        # Checked after the tenant: a rejection is only ever repeated to the one allowed to
        # write the session, and only rejections that depend on the session are remembered
        # (the ones above depend on who sent the command, or where, and recur on a retry).
        remembered = state.rejections.get(command.session_id, command.request_id)
        if remembered is not None:
            return Outcome(error=remembered, repeated=True)
        outcome = state.apply(command, size, self.limits, invariants)
        if outcome.error is not None and command.session_id not in state.broken:
            state.rejections.add(command.session_id, command.request_id, outcome.error)
        return outcome

    @staticmethod
    def _event_values(
        command: AppendCommand,
        frames: Sequence[DraftFrame] | None,
        outcome: Outcome,
        prefix: bytes | None = None,
    ) -> list[bytes]:
        """The events' topic values: assembled from the command's own bytes when it came in
        the current schema (see ``schemas.frames``), else encoded from the values. Also
        encoded when a draft says ``ignorable: false``: its bytes say so too, and an event
        must carry ``ignorable`` only as true (:func:`~producers.writer.wire.event_wire`).
        ``prefix``: the session's ``event_prefix``, if the caller keeps it."""
        sid = command.session_id
        if frames is not None and not any(d.get("ignorable") is False for d in command.events):
            prefix = prefix or event_prefix(sid)
            return [
                event_value(prefix, f, ev.seq, ev.time)
                for f, ev in zip(frames, outcome.events, strict=True)
            ]
        return [
            encode_event(event_wire(d, ev), sid)
            for d, ev in zip(command.events, outcome.events, strict=True)
        ]

    def _read(
        self,
        record: CommandRecord,
        command: AppendCommand,
        state: PartitionState,
        read_from: str,
        outbox: Outbox,
    ) -> None:
        """A read: the session's events from seq ``read_from`` on, at most
        :data:`READ_REPLY_BYTES` a reply (always one event), answered from memory in O(what
        is read). The reply is in the open transaction like any other, so it is seen only if
        everything it shows was committed: a read is ordered with the session's appends.
        Nothing of the session changes, and no request id is remembered."""
        sid, rid, cid = command.session_id, command.request_id, command.client_id
        error = self._refusal(record, command) or state.broken.get(sid)
        start = int(read_from) if read_from.isdigit() else -1
        if error is None and start < 0:
            error = MalformedCommandError(
                f"request {rid!r}: a read starts at a seq of 0 or more, not {read_from!r}"
            )
        held = None
        if error is None:
            try:
                held = state.held(sid)  # restored if evicted
            except SessionError as exc:
                error = exc
        headers = headers_of(REPLY, rid.encode())
        if error is not None:
            metrics.READS.labels("refused").inc()
            value = encode_reply(AppendReply.rejected(rid, cid, sid, error))
        else:
            metrics.READS.labels("served").inc()
            values, following = ([], None) if held is None else _read_part(held, start)
            if following is not None:
                headers.append((HEADER_READ_NEXT, str(following).encode()))
            if held is not None and not held.session.invariants:
                headers.append(invariants_header(False))
            value = committed_reply(rid, cid, sid, values)
        reply_partition = self._partition_of(cid, self.placement.reply_partitions)
        outbox.put(
            state.partition, self.topics.replies, value, cid.encode(), reply_partition, headers
        )

    def _reply(
        self,
        serves: int,
        command: AppendCommand,
        outcome: Outcome,
        values: list[bytes],
        outbox: Outbox,
    ) -> None:
        rid, cid, sid = command.request_id, command.client_id, command.session_id
        if outcome.error is not None:
            value = encode_reply(AppendReply.rejected(rid, cid, sid, outcome.error))
            first = command.events[0].get("type", "?") if command.events else "?"
            if outcome.repeated:  # the rejection was counted when it was made
                metrics.appends(str(first), "duplicate").inc()
            else:
                metrics.REJECTED.labels(type(outcome.error).__name__, outcome.error.code).inc()
                metrics.appends(str(first), "rejected").inc()
        else:
            value = committed_reply(rid, cid, sid, values)
            result = "committed" if outcome.new else "duplicate"
            events = outcome.events
            first_type = events[0].type
            if all(ev.type == first_type for ev in events):
                metrics.appends(first_type, result).inc(len(events))
            else:
                for ev in events:
                    metrics.appends(ev.type, result).inc()
        reply_partition = self._partition_of(cid, self.placement.reply_partitions)
        outbox.put(
            serves, self.topics.replies, value, cid.encode(), reply_partition, REPLY, rid.encode()
        )

    def _dead_letter(self, record: CommandRecord, exc: SessionError, outbox: Outbox) -> None:
        partition, offset = record.partition() or 0, record.offset() or 0
        source = source_of(record.topic() or "", partition, offset)
        log.warning(
            "undecodable command at %s: %s",
            source,
            exc,
            extra={
                "partition": partition,
                "session": (record.key() or b"").decode("utf-8", "replace"),
            },
        )
        headers = dead_letter_headers("writer", exc, source, record.headers())
        # -1: the partitioner's choice, by key.
        outbox.put(partition, self.topics.dlq, record.value(), record.key(), -1, headers)
        metrics.DLQ.inc()
