"""What ``dsh import`` publishes, made before anything is published: the file's events and
their drafts, cut into batches, each batch's append command encoded once, and the writer's
event-size limit checked on those very bytes.

The costs this keeps down, measured on a 100,000-event file: the cycle collector rescanning
the events while they pile up (more than half of reading the file), a second deep copy of
every event for its draft (the drafts are the file's parsed values, which the frozen events
were copied from), and a second Avro encoding of every event for the size check (an event's
bytes are its command's draft bytes plus an envelope, so a command well under the limit
proves every event in it is).
"""

from __future__ import annotations

import gc
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

import dsh
from dsh.json_snapshot import thaw
from producers.errors import PayloadTooLargeError
from schemas import AppendCommand, encode_command, encode_event
from schemas.frames import SPLICEABLE

# Batches this large halve the writer's per-command work against 128 KiB / 256 (measured:
# about 8 % more events/s on 100,000 events). JSON is usually larger than Avro for the same
# events, but not always, so each encoded command is held to COMMAND_MAX_BYTES as well.
BATCH_MAX_JSON_BYTES = 256 * 1024
BATCH_MAX_EVENTS = 512
# Under the writer's default command limit (512 KiB) and the broker's 1 MB record limit; a
# command over it is split in halves.
COMMAND_MAX_BYTES = 384 * 1024
# An event's value beyond its draft's bytes: header, session id, format version, seq, time.
_ENVELOPE_BYTES = 64


@dataclass(frozen=True)
class Batch:
    first: int
    drafts: tuple[dict[str, Any], ...]

    @property
    def last(self) -> int:
        return self.first + len(self.drafts) - 1


class SparedCollector:
    """The cycle collector kept off the file's values for the whole import. While a file's
    worth of long-lived, acyclic values is built it is off (as in ``dsh.restore``): it would
    rescan them over and over and find no garbage. Once they are built they are set aside
    (``gc.freeze``, which moves them without a scan; re-enabling alone would have the next
    collection scan them all, a second on 100,000 events) and the collector runs again for
    what publishing allocates. At the end they are given back."""

    def __enter__(self) -> SparedCollector:
        self._enabled = gc.isenabled()
        gc.disable()
        return self

    def loaded(self) -> None:
        gc.freeze()
        if self._enabled:
            gc.enable()

    def __exit__(self, *exc: object) -> None:
        gc.unfreeze()
        if self._enabled:
            gc.enable()


def draft_of(ev: dsh.Event, data: Any) -> dict[str, Any]:
    """``ev`` as an append (no seq or time), with ``data``: the plain value it was frozen
    from, so the draft costs no copy of it. The envelope is the event's own (normalised)."""
    d: dict[str, Any] = {"type": ev.type, "data": data}
    op = ev.surface_op
    if op is not None:
        d["surfaceOp"] = op.to_json() if type(op) is dsh.Replace else thaw(op)
    sources = ev.source_event_seqs
    if sources is not None:
        d["sourceEventSeqs"] = list(sources) if type(sources) is tuple else thaw(sources)
    if ev.ignorable:
        d["ignorable"] = True
    return d


def drafts_of(events: Sequence[dsh.Event]) -> list[dict[str, Any]]:
    """Drafts of events that came from elsewhere than a file (their data copied)."""
    return [draft_of(ev, thaw(ev.data)) for ev in events]


def batches(drafts: Sequence[dict[str, Any]], start: int) -> list[Batch]:
    out: list[Batch] = []
    batch: list[dict[str, Any]] = []
    size = 0
    first = start
    for seq in range(start, len(drafts)):
        d = drafts[seq]
        n = _json_size(d)
        if batch and (len(batch) >= BATCH_MAX_EVENTS or size + n > BATCH_MAX_JSON_BYTES):
            out.append(Batch(first, tuple(batch)))
            batch, size, first = [], 0, seq
        batch.append(d)
        size += n
    if batch:
        out.append(Batch(first, tuple(batch)))
    return out


def _json_size(d: dict[str, Any]) -> int:
    try:
        return len(orjson.dumps(d))
    except TypeError:  # an int beyond 64 bits: counted as json writes it
        import json

        return len(json.dumps(d, separators=(",", ":")))


def request_id(file_hash: str, session_id: str, first: int, count: int, attempt: str = "") -> str:
    """Deterministic within a round (``attempt``): a retry of this very batch is answered
    from the writer's request table, and expected_seq keeps any other copy from committing.
    Every run of ``dsh import`` and every later round of one, after a conflict or a refusal,
    gives its batches ids of their own (:func:`new_attempt`): the writer answers a rejected
    request with its first answer for good, so a re-run after the writer was fixed would get
    the old rejection back, and a batch behind a refused one was rejected with a conflict its
    range no longer has."""
    return f"import:{file_hash[:32]}{attempt}:{session_id}:{first}:{count}"


def new_attempt() -> str:
    """The ``attempt`` of a new run or round: a new attempt, not a retry of an earlier one."""
    return f"~{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Plan:
    """An import from seq 0: its batches and their commands, encoded for ``client_id``."""

    client_id: str
    batches: tuple[Batch, ...]
    commands: tuple[bytes, ...]
    attempt: str = ""  # of the commands' request ids

    @classmethod
    def of(
        cls,
        drafts: Sequence[dict[str, Any]],
        session_id: str,
        client_id: str,
        file_hash: str,
        attempt: str = "",
    ) -> Plan:
        planned = [
            pair
            for b in batches(drafts, 0)
            for pair in encoded(b, session_id, client_id, file_hash, attempt)
        ]
        return cls(client_id, tuple(b for b, _ in planned), tuple(c for _, c in planned), attempt)

    def planned(self) -> list[tuple[Batch, bytes]]:
        return list(zip(self.batches, self.commands, strict=True))


def encode_batch(
    batch: Batch, session_id: str, client_id: str, file_hash: str, attempt: str = ""
) -> bytes:
    rid = request_id(file_hash, session_id, batch.first, len(batch.drafts), attempt)
    return encode_command(AppendCommand(rid, client_id, session_id, batch.drafts, batch.first))


def encoded(
    batch: Batch, session_id: str, client_id: str, file_hash: str, attempt: str = ""
) -> list[tuple[Batch, bytes]]:
    """``batch`` with its command, or its halves with theirs while the command is over
    :data:`COMMAND_MAX_BYTES` (a single event over it is the writer's to refuse)."""
    command = encode_batch(batch, session_id, client_id, file_hash, attempt)
    if len(command) <= COMMAND_MAX_BYTES or len(batch.drafts) == 1:
        return [(batch, command)]
    half = len(batch.drafts) // 2
    head = Batch(batch.first, batch.drafts[:half])
    tail = Batch(batch.first + half, batch.drafts[half:])
    return [
        *encoded(head, session_id, client_id, file_hash, attempt),
        *encoded(tail, session_id, client_id, file_hash, attempt),
    ]


def check_sizes(
    session_id: str,
    events: Sequence[dsh.Event],
    planned: Sequence[tuple[Batch, bytes]],
    max_event_bytes: int,
    origin: str,
) -> None:
    """The writer's event-size limit, checked before anything is published: the writer would
    refuse the event only after committing the ones before it. An event's value is its draft's
    bytes, which are part of its command's, plus the envelope: a command that small enough
    needs no further look; the events of any other are encoded as the writer would."""
    bound = len(session_id.encode()) + _ENVELOPE_BYTES
    for batch, command in planned:
        if SPLICEABLE and len(command) + bound <= max_event_bytes:
            continue
        for seq in range(batch.first, batch.last + 1):
            event = events[seq]
            size = len(encode_event(event.to_json(), session_id))
            if size > max_event_bytes:
                raise PayloadTooLargeError(
                    f"{origin}: seq {event.seq} ({event.type}) is {size:,} bytes as an event, "
                    f"over the writer's limit of {max_event_bytes:,} "
                    "(DSH_WRITER_MAX_EVENT_BYTES); nothing was published",
                    code="EVENT_TOO_LARGE",
                )
