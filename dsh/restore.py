"""Restoring a session from its log, and forking one at a turn boundary.

Restore runs every event through the same path as append (``Session.append_logged``), plus
what only a stored log can get wrong: the envelope and contiguous seqs. Recorded times are kept
as logged, even going backwards as DSH's restore keeps them (append alone guarantees they never
do); only a time beyond a signed 64-bit integer, which the wire cannot carry, is refused.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dsh.errors import ForkError, RestoreError, SessionError, ValidationError
from dsh.event import Event, check_type
from dsh.json_snapshot import FrozenDict
from dsh.projections import Interpreter

if TYPE_CHECKING:
    from dsh.session import Session

END_SEED = "session/end-seed"
_INHERITED = FrozenDict({"inherited": True})


def restore(
    session: Session,
    events: Iterable[Event | Mapping[str, Any]],
    projections: Mapping[str, Interpreter] | None,
    *,
    mark_end: bool = True,
) -> Session:
    """``session`` with ``events`` applied, which continue it: from seq 0 for a new session,
    from ``len(session)`` to bring a restored one up to date (a tail read since)."""
    for event_type, interpreter in (projections or {}).items():
        session.register_message_projection(event_type, interpreter)
    # Restore builds many long-lived, acyclic objects (frozen JSON, events). The cycle collector
    # would rescan them over and over while they pile up (measured: ~2x slower restore from wire
    # dicts) and can find no garbage among them, so it is paused for the bulk load.
    paused = gc.isenabled()
    gc.disable()
    try:
        last = _replay(session, events)
    finally:
        if paused:
            gc.enable()
    if mark_end and last is not None and last.type != END_SEED:
        append_marker(session, {})
    return session


def _replay(session: Session, events: Iterable[Event | Mapping[str, Any]]) -> Event | None:
    start = len(session)
    checked: list[Event] = []
    failure: RestoreError | None = None
    for index, raw in enumerate(events):
        try:
            if type(raw) is Event:
                ev = raw
                _check_envelope(ev)  # from_json checks the same for wire dicts
            else:
                ev = Event.from_json(raw)  # type: ignore[arg-type]
            if ev.seq != start + index:
                raise RestoreError(
                    f"event at index {index} has seq {ev.seq} (expected {start + index}); a log "
                    f"must be contiguous from {start}",
                    index=index,
                    code="RESTORE_NOT_CONTIGUOUS",
                )
        except RestoreError as exc:
            failure = exc
            break
        except SessionError as exc:
            failure = RestoreError(
                f"invalid event at index {index}: {exc.message}", index=index, code=exc.code
            )
            failure.__cause__ = exc
            break
        checked.append(ev)
    # The events before a malformed one are applied first: a rule one of them breaks is the
    # error to report, as if each event were checked and applied in turn.
    try:
        session.append_logged(checked)
    except SessionError as exc:
        index = len(session) - start  # the rejected event: all before it were committed
        raise RestoreError(
            f"invalid event at index {index}: {exc.message}", index=index, code=exc.code
        ) from exc
    if failure is not None:
        raise failure
    return checked[-1] if checked else None


def _check_envelope(ev: Event) -> None:
    check_type(ev.type, ev.seq)
    if type(ev.seq) is not int or type(ev.time) is not int or type(ev.ignorable) is not bool:
        raise ValidationError(
            f"event {ev.seq!r}: seq and time must be ints and ignorable a bool",
            code="INVALID_ENVELOPE",
        )


def append_marker(session: Session, data: Mapping[str, Any]) -> Event:
    # Stamped with the last logged time, not the clock, so restore stays a pure function of the
    # log (two restores of one log are equal, which replay/verify rely on). Valid by
    # construction, it still goes through every rule.
    ev = Event(END_SEED, len(session), session.last_time, data)
    session.append_logged((ev,))
    return ev


def fork(parent: Session, child_id: str, at: int | None) -> Session:
    n = len(parent)
    boundary = n if at is None else at
    if type(boundary) is not int or not 1 <= boundary <= n:
        raise ForkError(
            f"fork boundary {boundary - 1 if type(boundary) is int else boundary!r} does not "
            f'exist in session "{parent.id}" (last seq: {n - 1})',
            code="INVALID_BOUNDARY",
        )
    events = parent.events(0, boundary)
    open_turn = parent.turns.open_turn if boundary == n else _open_turn_in(events)
    if open_turn is not None:
        raise ForkError(
            f'fork boundary {boundary - 1} in session "{parent.id}" ends inside open turn '
            f"{open_turn}",
            code="OPEN_TURN",
        )
    child = type(parent)(child_id, clock=parent.clock, invariants=parent.invariants)
    restore(child, events, parent.projections, mark_end=False)
    append_marker(child, _INHERITED)
    return child


def _open_turn_in(events: Sequence[Event]) -> int | None:
    # Only the events since the last turn boundary matter: O(turn length), not O(log).
    for i in range(len(events) - 1, -1, -1):
        ev = events[i]
        if ev.type == "turn/end":
            return None
        if ev.type == "turn/start":
            turn: int = ev.data["turn"]
            return turn
    return None
