"""``Writer._idle`` with stand-ins for the consumer and the pipeline (no broker): a failure
of the idle transaction leaves the sessions its checkpoint took out evicted as they were."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from producers.writer.residency import Evicted
from producers.writer.service import Writer
from producers.writer.snapshots import Snapshots
from producers.writer.state import PartitionState, SessionState, new_session
from tests.support.builders import user
from tests.support.outbox import SnapshotOutbox

FAILURE = KafkaException(KafkaError(KafkaError._TIMED_OUT, "begin timed out"))


class _Txn(SnapshotOutbox):
    def __init__(self, fail_put: bool) -> None:
        super().__init__()
        self.fail_put = fail_put
        self.offsets: dict[int, int] = {}
        self.states: dict[int, PartitionState] = {}
        self.producer = None

    def put(self, *args: Any, **kwargs: Any) -> None:
        if self.fail_put:
            raise RuntimeError("produce failed")
        super().put(*args, **kwargs)


def _writer(
    monkeypatch: pytest.MonkeyPatch, begin: Any
) -> tuple[Any, PartitionState, dict[str, list[Any]]]:
    """A writer owing a checkpoint of partition 0, with two evicted dirty sessions; ``calls``
    records its recoveries, aborts and the sessions it read back ("reload")."""
    state = PartitionState(0, commands_next=3, checkpoint_owed=True)
    for i in range(2):
        state.residency.drop(f"quiet-{i}", Evicted(1, True, None, -1, i, 50))
        state.dirty.add(f"quiet-{i}")
    logs = {sid: SessionState(new_session(sid, {})) for sid in ("quiet-0", "quiet-1")}
    for sid, held in logs.items():
        held.session.append("user/message", user(sid), surface_op="append")
    calls: dict[str, list[Any]] = {"recover": [], "abort": [], "reload": []}

    def reload(sid: str, stub: Evicted) -> SessionState:
        calls["reload"].append(sid)
        return logs[sid]

    state.residency.reload = reload
    writer = object.__new__(Writer)
    monkeypatch.setattr(writer, "_recover", lambda exc, lane: calls["recover"].append(exc))
    writer.ownership = SimpleNamespace(partitions={0: state})  # type: ignore[assignment]
    writer.snapshots = Snapshots(
        "snapshots",
        snapshot_every=0,
        checkpoint_every=4,
        max_snapshot_bytes=4_000,
        events_end=lambda p: 2,
    )
    writer.pipeline = SimpleNamespace(  # type: ignore[assignment]
        turn=1, begin=begin, abort_quietly=lambda: calls["abort"].append(True)
    )
    return writer, state, calls


def test_a_begin_that_fails_puts_the_sessions_taken_out_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def begin() -> None:
        raise FAILURE

    writer, state, calls = _writer(monkeypatch, begin)
    stubs = dict(state.residency.evicted)
    writer._idle()
    assert calls["recover"] == [FAILURE]
    assert sorted(calls["reload"]) == ["quiet-0", "quiet-1"]  # taken out before begin()
    assert state.residency.evicted == stubs and not state.sessions


def test_a_produce_that_fails_puts_the_sessions_taken_out_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer, state, calls = _writer(monkeypatch, lambda: _Txn(fail_put=True))
    stubs = dict(state.residency.evicted)
    with pytest.raises(RuntimeError, match="produce failed"):
        writer._idle()
    assert calls["abort"] == [True] and not calls["recover"]
    assert calls["reload"]  # a session was taken out, then its snapshot failed to produce
    assert state.residency.evicted == stubs and not state.residency.leaving
