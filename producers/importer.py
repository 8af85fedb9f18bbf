"""``dsh import``: publish a session file (any supported version) as a session, through the writer.

The file is read with ``dsh.formats`` (v0/v1/v2 migrated to v3), validated locally with the
core, and appended through :class:`SessionClient`, so the writer validates it exactly like live
appends. Appends are pipelined in all-or-nothing batches, each with ``expected_seq`` (it can
only ever commit at its own position) and a request id derived from the file's hash, the run,
the target session and the batch's seqs (a retried batch is answered once, never appended
twice; a re-run is a new attempt, validated again).

An existing target session is resumed only when its events are a prefix of the file's (an
interrupted import, re-run); any other existing session is refused. Event times are assigned
by the writer: the file's times are not preserved (the append command carries none).

The session keeps the file's invariants mode (:class:`Mode`): the one its header records, else
on, unless the caller chooses; the writer fixes it when the first batch creates the session.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dsh
from dsh.errors import (
    FormatError,
    InvariantError,
    RestoreError,
    SessionError,
    ValidationError,
    register_error,
)
from dsh.formats import SessionHeader
from dsh.formats.jsonl import INVALID_EVENT, read_entries
from dsh.projections import Interpreter
from dsh.restore import restore
from producers.import_plan import (
    Batch,
    Plan,
    SparedCollector,
    batches,
    check_sizes,
    draft_of,
    drafts_of,
    encoded,
    new_attempt,
    request_id,
)
from schemas import EventRecord
from servicekit.progress import Progress
from servicekit.settings import KafkaSettings
from servicekit.topics import partition_counts

# Batches in flight: enough to keep the writer's batches full, few enough that a rejection
# wastes little (the batches behind a rejected one fail their expected_seq and commit nothing).
WINDOW = 16
# Rounds of "re-read the session and continue from what committed" after timeouts or
# expected-seq conflicts that made no progress, before giving up.
MAX_STALLED_ROUNDS = 3
WRITER_HINT = "start one with `dsh writer`"


@register_error
class SessionImportError(SessionError):
    default_code = "IMPORT"


@register_error
class ImportFileError(SessionImportError):
    """``FILE_NOT_FOUND`` or ``FILE_UNREADABLE``."""

    default_code = "FILE_NOT_FOUND"


@register_error
class SessionExistsError(SessionImportError):
    """The target session has events that are not a prefix of the file."""

    default_code = "SESSION_EXISTS"


@register_error
class ImportRejectedError(SessionImportError):
    """The writer refused a batch. ``error_class``/``error_code`` are the writer's; ``first_seq``
    and ``last_seq`` bound the batch; events before it are committed (a re-run resumes)."""

    default_code = "IMPORT_REJECTED"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        error_class: str = "",
        error_code: str = "",
        first_seq: int = -1,
        last_seq: int = -1,
    ) -> None:
        super().__init__(message, code=code)
        self.error_class = error_class
        self.error_code = error_code
        self.first_seq = first_seq
        self.last_seq = last_seq


@dataclass(frozen=True)
class ImportResult:
    session_id: str
    source_version: int  # the file's format version before migration
    events: int  # events in the file (after migration)
    already_present: int  # events the session held before this run (a resumed import)
    published: int  # events appended by this run
    final_seq: int  # last seq of the session, -1 if empty
    seconds: float
    # The lineage DSH wrote in the file's header (cwd, parentSession, isSeeded), as it was.
    lineage: dict[str, Any] = field(default_factory=dict)
    invariants: bool = True  # the session's invariants mode

    def to_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "invariants": self.invariants,
            "sourceVersion": self.source_version,
            "events": self.events,
            "alreadyPresent": self.already_present,
            "published": self.published,
            "finalSeq": self.final_seq,
            "seconds": round(self.seconds, 3),
            **({"lineage": self.lineage} if self.lineage else {}),
        }


@dataclass(frozen=True)
class Mode:
    """The invariants mode an import gives its session, and what chose it (for messages)."""

    invariants: bool
    chosen_by: str

    @classmethod
    def of(cls, header: SessionHeader, asked: bool | None) -> Mode:
        """``asked`` (``--invariants``) if given, else what the file's header records (a file
        this pipeline exported does), else on."""
        if asked is not None:
            return cls(asked, "--invariants")
        if header.invariants is not None:
            return cls(header.invariants, "the file's header")
        return cls(True, "the default; the file's header does not say")


def read_session_file(
    path: str | Path,
) -> tuple[SessionHeader, tuple[dsh.Event, ...], list[dict[str, Any]], str]:
    """Header, v3 events, each event's draft and the SHA-256 of the file's bytes; typed
    errors name the file. As ``dsh.formats.read_jsonl`` reads it, keeping the parsed values
    the events are frozen copies of as the drafts."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ImportFileError(f"{p}: no such file", code="FILE_NOT_FOUND") from None
    except OSError as exc:
        raise ImportFileError(f"{p}: cannot read: {exc.strerror}", code="FILE_UNREADABLE") from None
    try:
        # The bytes already read, not the path again: the hash names exactly what is
        # imported. Split as a file opened in binary splits: only b"\n" ends a line (a bare
        # b"\r", which bytes.splitlines also splits on, is JSON whitespace).
        header, entries = read_entries(io.BytesIO(raw))
        events: list[dsh.Event] = []
        drafts: list[dict[str, Any]] = []
        for entry in entries:
            try:
                ev = dsh.Event.from_json(entry.event)
            except ValidationError as exc:
                where = entry.where(dsh.SESSION_FORMAT_VERSION)
                raise FormatError(f"{where}: {exc.message}", code=INVALID_EVENT) from exc
            events.append(ev)
            drafts.append(draft_of(ev, entry.event["data"]))
    except FormatError as exc:
        raise FormatError(f"{p}: {exc.message}", code=exc.code) from exc
    return header, tuple(events), drafts, hashlib.sha256(raw).hexdigest()


def validate_locally(
    session_id: str,
    events: Sequence[dsh.Event],
    origin: str,
    projections: Mapping[str, Interpreter] | None = None,
    mode: Mode | None = None,
) -> None:
    """Restore with the core's rules first: a bad file fails naming its seq before anything is
    published, instead of leaving a half-imported session behind. ``projections`` must name
    the interpreters the writer has, or a file with message projections is refused here;
    ``mode``: the invariants mode the session will have (default: on)."""
    mode = mode or Mode(True, "the default")
    try:
        session = dsh.Session(session_id, invariants=mode.invariants)
        restore(session, events, projections, mark_end=False)
    except RestoreError as exc:
        hint = ""
        if isinstance(exc.__cause__, InvariantError):
            hint = (
                f"; it breaks the turn invariants, which are on ({mode.chosen_by}). DSH creates "
                "sessions without them unless asked, and such a session's file may break them: "
                "import it with --invariants off to keep that mode"
            )
        raise RestoreError(
            f"{origin}: seq {exc.index} is not a valid continuation: {exc.message}{hint}",
            index=exc.index,
            code=exc.code,
        ) from exc


def _wire(event: dsh.Event) -> dict[str, Any]:
    w = event.to_json()
    w.pop("time", None)
    return w


def committed_prefix(
    existing: Sequence[dsh.Event], events: Sequence[dsh.Event], session_id: str, origin: str
) -> int:
    """How many of the file's events the session already holds, or ``SessionExistsError``."""
    for seq, have in enumerate(existing):
        if seq >= len(events) or _wire(have) != _wire(events[seq]):
            where = (
                f"it has {len(existing)} events, the file {len(events)}"
                if seq >= len(events)
                else f"seq {seq} differs: {have.type} in the session, {events[seq].type} in "
                "the file"
            )
            raise SessionExistsError(
                f"session {session_id!r} already exists and is not a prefix of {origin} "
                f"({where}); import it under a new id with --session-id NEW",
                code="SESSION_EXISTS",
            )
    return len(existing)


def import_events(
    client: Any,
    session_id: str,
    events: Sequence[dsh.Event],
    *,
    file_hash: str,
    origin: str,
    progress: Progress | None = None,
    writer_hint: str = WRITER_HINT,
    mode: Mode | None = None,
    drafts: Sequence[dict[str, Any]] | None = None,
    plan: Plan | None = None,
) -> tuple[int, int]:
    """Append ``events`` (validated v3) to ``session_id`` through ``client`` (a SessionClient);
    returns (events already present, events published by this call). ``writer_hint`` says how
    to start a writer when none answers (the CLI knows whether the local stack runs it);
    ``mode``: the invariants mode the session is created with (default: on). ``drafts``: the
    events as appends (default: made from them); ``plan``: the commands of an import from seq
    0, encoded beforehand (used when nothing is committed yet)."""
    from producers.errors import AppendTimeoutError, ConflictError, InvariantsModeError

    mode = mode or Mode(True, "the default")
    existing = _committed(client, session_id)
    present = committed_prefix(existing.events(), events, session_id, origin)
    if present and existing.invariants != mode.invariants:
        raise InvariantsModeError(
            f"session {session_id!r} already exists with invariants "
            f"{'on' if existing.invariants else 'off'}, and {origin} is imported with them "
            f"{'on' if mode.invariants else 'off'} ({mode.chosen_by}); a session's mode is "
            "fixed when it is created: import under a new id with --session-id NEW"
        )
    if drafts is None:
        drafts = drafts_of(events)
    done = present
    published = 0
    stalled = 0
    started = time.monotonic()
    if progress is not None:
        progress(done, len(events))
    # A run is a new attempt (import_plan.request_id): a re-run after the writer was fixed is
    # validated again, not answered with the rejection the writer remembers.
    attempt = plan.attempt if plan is not None else new_attempt()
    while done < len(events):
        in_flight: list[tuple[Batch, Future[list[EventRecord]]]] = []
        failure: SessionError | None = None
        todo: list[tuple[Batch, bytes]]
        if plan is not None and done == 0 and plan.client_id == client.client_id:
            todo = plan.planned()
        else:
            todo = [
                pair
                for b in batches(drafts, done)
                for pair in encoded(b, session_id, client.client_id, file_hash, attempt)
            ]
        plan = None  # a later round starts where the session stands
        next_batch = 0
        before = done
        while (next_batch < len(todo) or in_flight) and failure is None:
            while next_batch < len(todo) and len(in_flight) < WINDOW:
                b, command = todo[next_batch]
                next_batch += 1
                fut = client.append_encoded_async(
                    session_id,
                    command,
                    request_id(file_hash, session_id, b.first, len(b.drafts), attempt),
                    invariants=mode.invariants,
                )
                in_flight.append((b, fut))
            b, fut = in_flight.pop(0)
            try:
                committed = fut.result()
            except (AppendTimeoutError, ConflictError) as exc:
                failure = exc
                break
            except ValidationError as exc:
                for _, later in in_flight:
                    # Behind the rejected batch, each fails its expected_seq: commits nothing.
                    with contextlib.suppress(SessionError):
                        later.result()
                refused = _pinpoint(
                    client, session_id, b, file_hash, attempt, origin, exc, mode.invariants
                )
                if refused is not None:
                    raise refused from exc
                # Refused whole (over a limit of the writer's), yet each event committed on
                # its own: the next round goes on after it.
                failure = exc
                break
            _check_reply(committed, b, session_id)
            done = b.last + 1
            published += len(committed)
            if progress is not None:
                progress(done, len(events))
        for _, fut in in_flight:
            # Those behind a failed batch: let each settle (a commit or a conflict) so the
            # re-read below sees every outcome, not a race with them.
            with contextlib.suppress(SessionError):
                fut.result()
        if failure is None:
            break
        # A timeout (outcome unknown) or a conflict: the log decides what committed.
        attempt = new_attempt()
        session = client.read_log(session_id)
        now = committed_prefix(session.events(), events, session_id, origin)
        published += max(0, now - done)
        done = now
        stalled = 0 if done > before else stalled + 1
        if stalled >= MAX_STALLED_ROUNDS:
            if isinstance(failure, AppendTimeoutError):
                resume = f"after seq {done - 1}" if done else "at seq 0 (nothing was committed)"
                raise SessionImportError(
                    f"{origin}: no writer answered for session {session_id!r} in "
                    f"{time.monotonic() - started:.1f}s ({stalled} tries without progress); "
                    f"is a writer running? {writer_hint}; then re-run the import: it resumes "
                    f"{resume}",
                    code="WRITER_TIMEOUT",
                ) from failure
            raise failure
    return present, published


def _committed(client: Any, session_id: str) -> dsh.Session:
    """The session as committed now: from the writer that owns it, which answers from memory
    in one round trip per 512 KiB of the session, whatever else its partition holds; from the
    log itself only when no writer answers (a scan of the whole partition)."""
    from producers.errors import AppendTimeoutError, WriterUnavailableError

    try:
        session: dsh.Session = client.read(session_id)
    except (AppendTimeoutError, WriterUnavailableError):
        session = client.read_log(session_id)
    return session


def _pinpoint(
    client: Any,
    session_id: str,
    batch: Batch,
    file_hash: str,
    attempt: str,
    origin: str,
    first: SessionError,
    invariants: bool,
) -> ImportRejectedError | None:
    """The batch was refused as a whole (nothing of it committed): append its events one by one
    to find the exact seq the writer refuses. The ones before it commit, so the session ends
    as the longest accepted prefix and a re-run of the fixed file resumes right there. None
    when none is refused on its own: the batch was over a limit as a whole, and every event
    of it is committed now."""
    from producers.errors import AppendTimeoutError, ConflictError

    exc: SessionError = first
    seq = batch.first
    for i, d in enumerate(batch.drafts):
        seq = batch.first + i
        rid = request_id(file_hash, session_id, seq, 1, attempt)
        try:
            client.append_many(
                session_id, [d], expected_seq=seq, request_id=rid, invariants=invariants
            )
        except (AppendTimeoutError, ConflictError):
            seq = batch.first  # the session moved under us: report the batch as refused
            break
        except ValidationError as single:
            exc = single
            break
    else:
        return None
    return ImportRejectedError(
        f"{origin}: the writer rejected seq {seq} ({batch.drafts[seq - batch.first]['type']}) "
        f"of session {session_id!r} with {type(exc).__name__} [{exc.code}]: {exc.message}; "
        f"seqs before {seq} are committed (a re-run of a fixed file resumes after them)",
        error_class=type(exc).__name__,
        error_code=exc.code,
        first_seq=seq,
        last_seq=seq,
    )


def _check_reply(committed: Sequence[EventRecord], batch: Batch, session_id: str) -> None:
    got = [(r.event["seq"], r.event["type"]) for r in committed]
    want = [(batch.first + i, d["type"]) for i, d in enumerate(batch.drafts)]
    if got != want:  # a writer bug, never an input problem: stop before building on it
        raise ImportRejectedError(
            f"session {session_id!r}: the writer committed {got[:3]}… for seqs "
            f"{batch.first}..{batch.last}",
            code="IMPORT_REPLY_MISMATCH",
            first_seq=batch.first,
            last_seq=batch.last,
        )


def import_file(
    path: str | Path,
    *,
    kafka: KafkaSettings | None = None,
    session_id: str | None = None,
    timeout: float = 30.0,
    connect_timeout: float = 10.0,
    progress: Progress | None = None,
    projections: Mapping[str, Interpreter] | None = None,
    writer_hint: str = WRITER_HINT,
    max_event_bytes: int | None = None,
    invariants: bool | None = None,
) -> ImportResult:
    """Publish the session file at ``path`` as session ``session_id`` (default: the file's id).
    ``max_event_bytes``: the writer's limit (default: the writer's default limit); a larger
    event is refused before anything is published. ``invariants``: the session's mode
    (default: what the file's header records, else on; see :meth:`Mode.of`)."""
    from producers.client import SessionClient
    from producers.writer.settings import WriterSettings

    started = time.perf_counter()
    kafka = kafka or KafkaSettings()
    with SparedCollector() as collector:
        header, events, drafts, file_hash = read_session_file(path)
        target = session_id or header.id
        mode = Mode.of(header, invariants)
        validate_locally(target, events, str(path), projections, mode)
        if max_event_bytes is None:
            max_event_bytes = WriterSettings.model_fields["max_event_bytes"].default
        # The commands are encoded once, here: the size check reads them, then they are sent.
        plan = Plan.of(drafts, target, f"import-{uuid.uuid4().hex}", file_hash, new_attempt())
        check_sizes(target, events, plan.planned(), max_event_bytes, str(path))
        collector.loaded()
        # Fails in ``connect_timeout`` naming the fix; the client's own check waits longer.
        topics = [kafka.topic(n) for n in ("commands", "events", "replies")]
        partition_counts(kafka, topics, connect_timeout, quiet=True)
        with SessionClient(
            settings=kafka, client_id=plan.client_id, timeout=timeout, interpreters=projections
        ) as client:
            present, published = import_events(
                client,
                target,
                events,
                file_hash=file_hash,
                origin=str(path),
                progress=progress,
                writer_hint=writer_hint,
                mode=mode,
                drafts=drafts,
                plan=plan,
            )
    return ImportResult(
        session_id=target,
        source_version=header.source_version,
        events=len(events),
        already_present=present,
        published=published,
        final_seq=len(events) - 1,
        seconds=time.perf_counter() - started,
        lineage=header.lineage(),
        invariants=mode.invariants,
    )
