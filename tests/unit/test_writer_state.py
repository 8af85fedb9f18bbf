"""The writer's in-memory partition state (``producers.state``), without Kafka: commands
applied all-or-nothing, retries answered from the log, and the snapshot assembled from the
events' topic bytes equal to the codec's encoding of the session, whichever bytes are known."""

from __future__ import annotations

import schemas
from producers.state import Limits, PartitionState, SessionState, rebuild
from producers.wire import answered_request
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
    restored = SessionState(rebuild("s", session.session.events()), dict(session.requests))
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
