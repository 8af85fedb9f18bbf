"""The writer's in-memory partition state (``producers.writer.state``), without Kafka: commands
applied all-or-nothing, retries answered from the log, and the snapshot assembled from the
events' topic bytes equal to the codec's encoding of the session, whichever bytes are known."""

from __future__ import annotations

import gc
import logging

import pytest

import producers.writer.state
import schemas
from producers.writer.state import (
    Limits,
    Outcome,
    PartitionState,
    SessionState,
    rebuild,
    without_traceback,
)
from producers.writer.wire import answered_request
from schemas import AnsweredRequest, AppendCommand, WriterSnapshot

LIMITS = Limits(1 << 20, 1 << 20)


def _user(i: int) -> dict[str, object]:
    return {
        "type": "user/message",
        "data": {
            "id": f"m{i}",
            "role": "user",
            "content": [{"type": "text", "text": f"hi {i}"}],
            "source": {"kind": "user"},
        },
        "surfaceOp": "append",
    }


def _apply(state: PartitionState, rid: str, *drafts: dict[str, object]) -> None:
    outcome = state.apply(AppendCommand(rid, "client", "s", drafts), 100, LIMITS)
    assert outcome.error is None and outcome.new
    session = state.sessions["s"]
    session.values.extend(schemas.encode_event(ev, "s") for ev in outcome.events)


def _codec_snapshot(session: SessionState) -> bytes:
    return schemas.encode_snapshot(
        WriterSnapshot(
            "s",
            tuple(ev.to_json() for ev in session.session.events()),
            tuple(
                AnsweredRequest(rid, session.clients.get(rid, ""), first, count)
                for rid, (first, count) in session.requests.items()
            ),
        )
    )


def test_snapshot_assembled_from_known_bytes_equals_the_codecs() -> None:
    state = PartitionState(0)
    _apply(state, "r1", _user(0), _user(1))
    _apply(state, "r2", _user(2))
    session = state.sessions["s"]
    assert session.snapshot() == _codec_snapshot(session)
    _apply(state, "r3", _user(3))  # the requests blob grows from where it was
    assert session.snapshot() == _codec_snapshot(session)


def test_snapshot_encodes_bytes_it_does_not_know_and_keeps_them() -> None:
    state = PartitionState(0)
    _apply(state, "r1", _user(0), _user(1), _user(2))
    session = state.sessions["s"]
    # As after a restore from a snapshot: the session is there, its bytes are not.
    restored = SessionState(rebuild("s", session.session.events(), {}), dict(session.requests))
    restored.values = [None, session.values[1]]
    assert restored.snapshot() == _codec_snapshot(restored)
    assert restored.values == session.values


def test_an_undone_command_leaves_neither_its_bytes_nor_its_request_in_the_snapshot() -> None:
    state = PartitionState(0)
    _apply(state, "r1", _user(0))
    session = state.sessions["s"]
    session.snapshot()  # the requests blob now covers r1
    command = AppendCommand("r2", "client", "s", (_user(1),))
    outcome = state.apply(command, 100, LIMITS)
    session.values.extend(schemas.encode_event(ev, "s") for ev in outcome.events)
    session.snapshot()
    state.undo(command, outcome)
    assert len(session.values) == len(session.session) == 1
    assert session.snapshot() == _codec_snapshot(session)


def test_answered_request_items_are_the_codecs() -> None:
    one = AnsweredRequest("rid-ü", "cli", 7, 3)
    with_one = schemas.encode_snapshot(WriterSnapshot("s", (), (one,)))
    without = schemas.encode_snapshot(WriterSnapshot("s", (), ()))
    assert answered_request("rid-ü", "cli", 7, 3) in with_one
    assert len(with_one) - len(without) == len(answered_request("rid-ü", "cli", 7, 3)) + 1


def _no_surface_op(i: int) -> dict[str, object]:
    draft = _user(i)
    del draft["surfaceOp"]
    return draft


def _rejected(state: PartitionState, command: AppendCommand, size: int = 100) -> Outcome:
    outcome = state.apply(command, size, LIMITS)
    assert outcome.error is not None
    return outcome


@pytest.mark.parametrize(
    ("command", "size", "code"),
    [
        # raised deep in the core
        (AppendCommand("r9", "client", "s", (_no_surface_op(1),)), 100, "SURFACE_OP_REQUIRED"),
        # raised by the writer's own limits
        (AppendCommand("r9", "client", "s", (_user(1),)), 2 << 20, "COMMAND_TOO_LARGE"),
        # made, not raised
        (
            AppendCommand("r9", "client", "s", (_user(1),), expected_seq=7),
            100,
            "EXPECTED_SEQ_MISMATCH",
        ),
    ],
)
def test_a_rejection_is_freed_without_the_cycle_collector(
    command: AppendCommand, size: int, code: str
) -> None:
    """A rejection's traceback would hold the writer's frames and, through their locals, the
    outcome that holds the rejection: a cycle per rejected command, which a frozen heap
    (DSH_WRITER_GC_FREEZE) keeps until a recovery sweeps it, with the partition's state
    inside it."""
    state = PartitionState(0)
    _apply(state, "r1", _user(0))
    gc.collect()
    gc.disable()
    try:
        outcome = _rejected(state, command, size)
        error = outcome.error
        assert error is not None and error.code == code
        assert error.__traceback__ is None
        del outcome, error
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_fault_in_the_core_is_logged_with_its_traceback_and_rejected_as_internal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(session: object, draft: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(producers.writer.state, "_append", broken)
    state = PartitionState(0)
    with caplog.at_level(logging.ERROR, logger="dsh.writer"):
        outcome = _rejected(state, AppendCommand("r1", "client", "s", (_user(0),)))
    assert outcome.error is not None and outcome.error.code == "INTERNAL"
    assert outcome.error.__traceback__ is None
    (record,) = caplog.records
    assert "request 'r1' to session 's': the core raised KeyError" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[2] is not None  # the traceback


def test_without_traceback_clears_the_errors_it_was_raised_from() -> None:
    try:
        try:
            try:
                raise OSError("first")
            except OSError as first:
                raise ValueError("second") from first
        except ValueError:
            raise RuntimeError("third")  # noqa: B904 (the implicit context is the point)
    except RuntimeError as exc:
        error = without_traceback(exc)
    assert error.__context__ is not None and error.__context__.__cause__ is not None
    chain = [error, error.__context__, error.__context__.__cause__]
    assert [e.__traceback__ for e in chain] == [None, None, None]
