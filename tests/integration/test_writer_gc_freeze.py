"""DSH_WRITER_GC_FREEZE against the real broker. The writer moves what survives each young
collection to the permanent generation, which the collector never walks: cyclic garbage that
got there stays. After a load and a recovery from a failed commit, the frozen objects are
handed back to the collector: what it then finds unreachable is what freezing kept (2,009
objects when first measured; the sessions' state itself is acyclic)."""

from __future__ import annotations

import gc
import uuid

import pytest

from deploy.config import KafkaSettings
from tests.integration.writer_support import (
    SESSIONS,
    CommitProbe,
    load_in_order,
    running_writer,
    writer_settings,
)


def test_a_freezing_writer_freezes_and_keeps_little_cyclic_garbage(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = [f"freeze-{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]
    CommitProbe(monkeypatch, fail_commit=5)  # one recovery: abort, restore, rewind
    # Young collections every 700 allocations (Python's own), so the writer freezes often.
    gc.collect()
    frozen_before = gc.get_freeze_count()
    try:
        with running_writer(topics, writer_settings(gc_freeze=True, gc_threshold=700)):
            load_in_order(topics, sessions)
            assert gc.get_freeze_count() > frozen_before  # it did freeze
    finally:
        gc.unfreeze()
    unreachable = gc.collect()
    assert unreachable < 5000, f"{unreachable} unreachable objects were frozen"
