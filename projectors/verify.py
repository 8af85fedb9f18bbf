"""``dsh verify SESSION``: restore the session from the events topic with the core and compare
the three projections in Redis with the core's own answers. Returns the differences."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dsh
from dsh.event import Event, Replace
from dsh.json_snapshot import thaw
from dsh.projections import Interpreter
from dsh.surface import Surface
from dsh.vocabulary import BUILTIN_PROJECTION_TYPES, SURFACE_TYPES
from projectors.audit import INDEXED, tool_error
from projectors.read_api import Reader
from projectors.records import Poison, Record, invariants_mode
from projectors.transcript import kind_of

PROJECTIONS = ("surface", "transcript", "audit")


@dataclass
class Report:
    session_id: str
    events: int = 0
    blocked_reason: str | None = None  # the log itself holds a poison record
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session_id,
            "events": self.events,
            "ok": self.ok,
            "blockedReason": self.blocked_reason,
            "differences": self.differences,
        }


def _same(value: Any) -> Any:
    """Compare as JSON: frozen and plain values, ints and their text, alike."""
    return json.loads(json.dumps(thaw(value), sort_keys=True))


def _diff(report: Report, what: str, got: Any, want: Any) -> None:
    if _same(got) != _same(want):
        report.differences.append(
            f"{what}:\n  redis: {json.dumps(_same(got))[:2000]}\n"
            f"  core:  {json.dumps(_same(want))[:2000]}"
        )


def verify(
    session_id: str,
    items: list[Record | Poison],
    reader: Reader,
    interpreters: Mapping[str, Interpreter],
) -> Report:
    report = Report(session_id)
    events: list[Event] = []
    for item in items:
        if isinstance(item, Poison):
            report.blocked_reason = f"[{item.error.code}] {item.error.message}"
            break
        events.append(item.event)
    report.events = len(events)
    if report.blocked_reason is not None:
        _expect_blocked(report, reader)
        return report
    last = events[-1].seq if events else -1
    try:
        session = dsh.Session.from_restore(
            session_id, events, projections=interpreters, invariants=invariants_mode(items)
        )
    except dsh.SessionError as exc:
        report.blocked_reason = f"[{exc.code}] {exc.message}"
        if exc.code not in INTERPRETER_CODES:
            _expect_blocked(report, reader)
            return report
        # This process lacks an interpreter the writer had. The transcript and audit apply
        # any projection type the writer took, so they are checked in full; the surface is
        # blocked if its projector lacks it too, and otherwise cannot be checked here.
        _expect_surface_blocked_or_unverifiable(report, reader)
        _check_transcript(report, reader, None, events, last)
        _check_audit(report, reader, events, last)
        return report
    _check_surface(report, reader, session, last)
    _check_transcript(report, reader, session, events, last)
    _check_audit(report, reader, events, last)
    return report


# Rules that need a node's type or data: only the surface projection keeps those, so only it
# refuses such an event; the transcript and audit record it.
SURFACE_ONLY_CODES = frozenset(
    {
        "NODE0_REPLACEMENT_NOT_SYSTEM",
        "NODE0_RANGE_TOO_WIDE",
        "TOOL_REWRITE_NOT_SINGLE",
        "TOOL_REWRITE_TARGET",
        "TOOL_REWRITE_CHANGED",
    }
)


# The core's answers when the verifying process has no interpreter for a message projection
# the log uses (UNKNOWN_TYPE: a type it does not even know): they say nothing about the log.
INTERPRETER_CODES = frozenset({"PROJECTION_INTERPRETER_MISSING", "UNKNOWN_TYPE"})


def _expect_surface_blocked_or_unverifiable(report: Report, reader: Reader) -> None:
    if reader.blocked("surface", report.session_id) is None:
        report.differences.append(
            f"surface: not verified: this process has no interpreter the log needs "
            f"({report.blocked_reason}) and the surface projector applied it; give `dsh verify` "
            "the projector's DSH_PROJECTOR_PROJECTIONS"
        )


def _expect_blocked(report: Report, reader: Reader) -> None:
    code = (report.blocked_reason or "")[1:].split("]")[0]
    projections = ("surface",) if code in SURFACE_ONLY_CODES else PROJECTIONS
    for projection in projections:
        if reader.blocked(projection, report.session_id) is None:
            report.differences.append(
                f"{projection}: the log cannot be applied ({report.blocked_reason}) but the "
                "session is not marked blocked"
            )


def _check_surface(report: Report, reader: Reader, session: dsh.Session, last: int) -> None:
    view = reader.surface(report.session_id)
    _diff(report, "surface applied seq", view.applied, last)
    _diff(report, "surface blocked", view.blocked, None)
    _diff(report, "surface nodes", view.nodes, list(session.surface.nodes))
    _diff(
        report,
        "surface generations (replace, content)",
        [view.replace_generation, view.content_generation],
        [session.surface.replace_generation, session.surface.content_generation],
    )
    if set(view.node_messages) == set(view.nodes):
        want = session.derive_messages()
        _diff(report, "surface messages vs derive_messages()", view.messages, want)
    else:
        _diff(report, "surface message keys", sorted(view.node_messages), sorted(view.nodes))


def _check_transcript(
    report: Report, reader: Reader, session: dsh.Session | None, events: list[Event], last: int
) -> None:
    """Against the events; also against the core's transcript when ``session`` restored."""
    _diff(report, "transcript applied seq", reader.transcript_applied(report.session_id), last)
    entries = reader.transcript(report.session_id)
    want = [(ev.seq, kind, ev.to_json()) for ev in events if (kind := kind_of(ev)) is not None]
    _diff(report, "transcript entries", [(e.seq, e.kind, e.event) for e in entries], want)
    if session is None:
        return
    surface_entries = [e.seq for e in entries if e.kind == "surface"]
    core = [ev.seq for ev in session.transcript()]
    _diff(report, "transcript vs Session.transcript()", surface_entries, core)


def _check_audit(report: Report, reader: Reader, events: list[Event], last: int) -> None:
    view = reader.audit(report.session_id)
    _diff(report, "audit applied seq", view.applied, last)
    _diff(report, "audit event records", sorted(view.events), [ev.seq for ev in events])
    surface = Surface()
    shadowed: dict[int, list[int]] = {}
    cited_by: dict[int, list[int]] = {}
    for ev in events:
        op = ev.surface_op
        if ev.ignorable and ev.type not in SURFACE_TYPES:
            continue
        if op == "append":
            surface.commit_append(ev.seq)
        elif type(op) is Replace:
            plan = surface.plan_replace(op, ev.seq)
            surface.commit_replace(plan, ev.seq)
            shadowed[ev.seq] = list(plan.shadowed)
        for source in ev.source_event_seqs or ():  # type: ignore[union-attr]
            cited_by.setdefault(int(source), []).append(ev.seq)
    got_shadowed = {s: r["shadowed"] for s, r in view.events.items() if "shadowed" in r}
    _diff(report, "audit: what each replacement shadowed", got_shadowed, shadowed)
    _diff(report, "audit: what cited each event", view.cited_by, cited_by)
    want_shadowed_by = {node: seq for seq, nodes in shadowed.items() for node in nodes}
    _diff(report, "audit: what shadowed each event", view.shadowed_by, want_shadowed_by)
    records, index = _audit_records(events, shadowed)
    wrong = [seq for seq, want in records.items() if _same(view.events.get(seq)) != _same(want)]
    for seq in wrong[:5]:  # the first few in full; a broken projection differs everywhere
        _diff(report, f"audit record of seq {seq}", view.events.get(seq), records[seq])
    if len(wrong) > 5:
        report.differences.append(f"audit records: {len(wrong) - 5} more differ")
    _diff(report, "audit indexes (requests, attempts, errors, lineage, …)", view.index, index)


def _audit_records(
    events: list[Event], shadowed: Mapping[int, list[int]]
) -> tuple[dict[int, dict[str, Any]], dict[str, list[int]]]:
    """What the audit should hold for each event and in each index, from the events and what
    the core's surface says each replacement shadowed. The types whose data it keeps and the
    index each goes to are the audit's own choice (``projectors.audit.INDEXED``)."""
    records: dict[int, dict[str, Any]] = {}
    index: dict[str, list[int]] = {}
    for ev in events:
        wire = ev.to_json()
        record: dict[str, Any] = {"type": ev.type, "time": ev.time}
        for key in ("surfaceOp", "sourceEventSeqs", "ignorable"):
            if key in wire:
                record[key] = wire[key]
        listed = "projections" if ev.type in BUILTIN_PROJECTION_TYPES else INDEXED.get(ev.type)
        if listed is not None:
            record["data"] = wire["data"]
        if ev.seq in shadowed:
            record["data"] = wire["data"]
            record["shadowed"] = shadowed[ev.seq]
            listed = "replaces"
        error = tool_error(ev) if ev.type == "tool/result" else None
        if error is not None:
            record["error"] = error
            index.setdefault("errors", []).append(ev.seq)
        if listed is not None:
            index.setdefault(listed, []).append(ev.seq)
        records[ev.seq] = record
    return records, index
