"""``dsh export --format jsonl SESSION``: one session, as committed in the events topic, as a
session file DSH reads (a v3 header, then its events), written atomically."""

from __future__ import annotations

from pathlib import Path

from dsh.formats import write_jsonl
from dsh.formats.header import SessionHeader
from projectors.errors import SessionUnknownError
from projectors.export.errors import ExportDirectoryError, ExportRecordError
from projectors.records import Record, invariants_mode
from projectors.topic_reader import read_session
from servicekit.progress import Progress
from servicekit.settings import KafkaSettings


def export_session(
    session_id: str,
    path: str | Path,
    *,
    kafka: KafkaSettings | None = None,
    progress: Progress | None = None,
    connect_timeout: float = 10.0,
) -> int:
    """Write ``session_id``'s events to ``path``; returns how many. Its header's
    ``createdAt`` is the first event's time (the log keeps no other); a session created with
    invariants off says so (``"invariants": false``), so an import keeps its mode.
    ``connect_timeout`` bounds the first contact with the broker."""
    target = Path(path)
    if not target.parent.is_dir():  # before the session is read, not after
        raise _unwritable(target, f"{target.parent} is not a directory")
    items = read_session(
        kafka or KafkaSettings(), session_id, progress=progress, connect_timeout=connect_timeout
    )
    if not items:
        raise SessionUnknownError(
            f"the events topic holds no event of session {session_id}: check the id and "
            "DSH_KAFKA_TOPIC_PREFIX"
        )
    bad = next((i for i in items if not isinstance(i, Record)), None)
    if bad is not None:
        raise ExportRecordError(
            f"session {session_id}: the record at partition {bad.partition}, offset "
            f"{bad.offset} does not decode ({bad.error}); the session cannot be written whole",
            code="RECORD_UNDECODABLE",
        )
    events = [i.event for i in items if type(i) is Record]
    header = SessionHeader(session_id, events[0].time, invariants=invariants_mode(items))
    try:
        write_jsonl(target, header, events)
    except OSError as exc:
        raise _unwritable(target, exc.strerror or str(exc)) from None
    return len(events)


def _unwritable(target: Path, why: str) -> ExportDirectoryError:
    return ExportDirectoryError(
        f"{target}: cannot write the session file: {why}; name a file in a directory you may "
        "write (--output)",
        code="EXPORT_OUTPUT_INVALID",
    )
