"""Commit overlap (DSH_WRITER_OVERLAP_COMMITS) against the real broker: the next transaction is
built while the previous one commits, a failed commit takes the transaction built after it
down with it, a commit refused for a moved group generation is produced again instead of
restored, and either way every append lands once, in order."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import REGISTRY

from deploy.config import KafkaSettings
from producers import SessionClient, metrics
from producers.writer import Writer
from tests.integration.writer_support import running_writer, user, writer_settings

SESSIONS = 6
APPENDS = 30


class CommitProbe:
    """Wraps ``Writer._commit`` (slowed down, so the overlap is wide enough to see) and
    ``Writer._handle``, recording when each ran; optionally fails one commit with ``error``
    before it reaches the broker (its transaction stays open there)."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        fail_commit: int | None = None,
        error: int = KafkaError._TIMED_OUT,
    ) -> None:
        self.commits: list[tuple[float, float]] = []
        self.handled: list[float] = []
        self._lock = threading.Lock()
        self._count = 0
        commit, handle = Writer._commit, Writer._handle

        def slow_commit(producer: Any, *args: Any) -> None:
            with self._lock:
                self._count += 1
                n = self._count
            started = time.monotonic()
            time.sleep(0.05)
            if n == fail_commit:
                raise KafkaException(KafkaError(error, "failed on purpose"))
            commit(producer, *args)
            self.commits.append((started, time.monotonic()))

        def timed_handle(writer: Writer, *args: Any) -> None:
            self.handled.append(time.monotonic())
            handle(writer, *args)

        monkeypatch.setattr(Writer, "_commit", staticmethod(slow_commit))
        monkeypatch.setattr(Writer, "_handle", timed_handle)

    def handled_while_committing(self) -> int:
        return sum(any(a < t < b for a, b in self.commits) for t in self.handled)


@pytest.fixture
def sessions() -> list[str]:
    return [f"overlap-{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]


def _load(topics: KafkaSettings, sessions: list[str]) -> None:
    """Each session appends one after another on its own thread, so commands keep coming
    while transactions commit; expected_seq turns any reordering or double append into a
    ConflictError."""
    with SessionClient(settings=topics, timeout=30) as client:

        def appends(sid: str) -> None:
            for i in range(APPENDS):
                ev = client.append(
                    sid, "user/message", user(f"u{i}"), surface_op="append", expected_seq=i
                )
                assert ev.seq == i, sid

        with ThreadPoolExecutor(len(sessions)) as pool:
            for done in [pool.submit(appends, sid) for sid in sessions]:
                done.result(120)
        for sid in sessions:
            ids = [e.data["id"] for e in client.read(sid).events()]
            assert ids == [f"u{i}" for i in range(APPENDS)], sid


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "one at a time"])
def test_the_next_transaction_is_built_while_the_previous_one_commits_only_with_overlap(
    topics: KafkaSettings, sessions: list[str], monkeypatch: pytest.MonkeyPatch, overlap: bool
) -> None:
    # With the setting off the same probe finds nothing: it can tell the two apart.
    probe = CommitProbe(monkeypatch)
    with running_writer(topics, writer_settings(overlap_commits=overlap)):
        _load(topics, sessions)
    assert probe.commits
    assert (probe.handled_while_committing() > 0) == overlap


def test_a_failed_commit_aborts_the_transaction_built_after_it_and_nothing_is_lost(
    topics: KafkaSettings, sessions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    aborts = metrics.TXN_ABORTS._value.get()
    CommitProbe(monkeypatch, fail_commit=5)
    with running_writer(topics, writer_settings(overlap_commits=True)) as writer:
        _load(topics, sessions)
        assert len(writer.owned) > 0  # recovered in place, still serving
    assert metrics.TXN_ABORTS._value.get() > aborts


def _restores() -> float:
    return REGISTRY.get_sample_value("dsh_writer_restore_seconds_count") or 0.0


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "one at a time"])
def test_a_commit_refused_for_a_moved_generation_is_produced_again_not_restored(
    topics: KafkaSettings, sessions: list[str], monkeypatch: pytest.MonkeyPatch, overlap: bool
) -> None:
    # What every writer that keeps partitions through a rebalance sees for the transaction in
    # flight; here the commit is refused before it reaches the broker, which still holds the
    # transaction open, so the retry must abort it first.
    again = metrics.TXN_PRODUCED_AGAIN._value.get()
    CommitProbe(monkeypatch, fail_commit=5, error=KafkaError.ILLEGAL_GENERATION)
    with running_writer(topics, writer_settings(overlap_commits=overlap)) as writer:
        restores = _restores()
        _load(topics, sessions)  # expected_seq: a record produced twice or lost is a conflict
        assert len(writer.owned) > 0
        assert _restores() == restores, "a partition was restored instead"
    assert metrics.TXN_PRODUCED_AGAIN._value.get() == again + 1
