"""Commit overlap (DSH_WRITER_OVERLAP_COMMITS) against the real broker: the next transaction is
built while the previous one commits, a failed commit takes the transaction built after it
down with it, a commit refused for a moved group generation is produced again instead of
restored, and either way every append lands once, in order. A lone append commits on the
writer's own thread (DSH_WRITER_INLINE_COMMIT_MAX_COMMANDS); the tests of the overlap turn that
off, so that every batch takes the overlapping path."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError
from prometheus_client import REGISTRY

from producers import SessionClient
from producers.writer import metrics
from producers.writer.pipeline import Pipeline
from producers.writer.settings import WriterSettings
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    APPENDS,
    SESSIONS,
    CommitProbe,
    load_in_order,
    running_writer,
    writer_settings,
)
from tests.support.builders import user


def _settings(overlap: bool) -> WriterSettings:
    """Every batch takes the overlapping path (none is committed inline, however small)."""
    return writer_settings(overlap_commits=overlap, inline_commit_max_commands=0)


@pytest.fixture
def sessions() -> list[str]:
    return [f"overlap-{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "one at a time"])
def test_the_next_transaction_is_built_while_the_previous_one_commits_only_with_overlap(
    topics: KafkaSettings, sessions: list[str], monkeypatch: pytest.MonkeyPatch, overlap: bool
) -> None:
    # With the setting off the same probe finds nothing: it can tell the two apart.
    probe = CommitProbe(monkeypatch)
    with running_writer(topics, _settings(overlap)):
        load_in_order(topics, sessions)
    assert probe.commits
    assert (probe.handled_while_committing() > 0) == overlap


def test_a_failed_commit_aborts_the_transaction_built_after_it_and_nothing_is_lost(
    topics: KafkaSettings, sessions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    aborts = metrics.TXN_ABORTS._value.get()
    CommitProbe(monkeypatch, fail_commit=5)
    with running_writer(topics, _settings(True)) as writer:
        load_in_order(topics, sessions)
        assert len(writer.owned()) > 0  # recovered in place, still serving
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
    with running_writer(topics, _settings(overlap)) as writer:
        restores = _restores()
        # expected_seq: a record produced twice or lost is a conflict
        load_in_order(topics, sessions)
        assert len(writer.owned()) > 0
        assert _restores() == restores, "a partition was restored instead"
    assert metrics.TXN_PRODUCED_AGAIN._value.get() == again + 1


@pytest.mark.parametrize("inline", [4, 0], ids=["inline", "always handed over"])
def test_a_lone_append_commits_on_the_writers_own_thread(
    topics: KafkaSettings, sessions: list[str], monkeypatch: pytest.MonkeyPatch, inline: int
) -> None:
    threads: list[str] = []
    commit = Pipeline._commit

    def recorded(pipeline: Pipeline, *args: Any) -> None:
        threads.append(threading.current_thread().name)
        commit(pipeline, *args)

    monkeypatch.setattr(Pipeline, "_commit", recorded)
    settings = writer_settings(overlap_commits=True, inline_commit_max_commands=inline)
    with running_writer(topics, settings), SessionClient(settings=topics, timeout=30) as client:
        for i in range(APPENDS // 3):
            ev = client.append(sessions[0], "user/message", user(f"u{i}"), surface_op="append")
            assert ev.seq == i
    assert threads
    # running_writer's thread is "writer"; the commit thread's names start "dsh-commit".
    on_writer = {name == "writer" for name in threads}
    assert on_writer == {bool(inline)}
