"""servicekit.gc_tuning: ``built_frozen`` freezes what a block builds, ``collector_paused``
only pauses; in both the collector never ran meanwhile, and it is as it was afterwards whatever
the block did."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from servicekit.gc_tuning import built_frozen, collector_paused


class _Built:
    pass


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.collect()
    yield
    gc.unfreeze()  # the rest of the test run gets its heap back under the collector


def _frozen_while(enabled: bool) -> tuple[int, int, bool]:
    """How many objects got frozen, how many collections ran, and whether the collector was
    on inside, while the block built 200,000 objects."""
    collections: list[int] = []
    gc.callbacks.append(lambda phase, info: collections.append(1) if phase == "start" else None)
    frozen = gc.get_freeze_count()
    try:
        with built_frozen(enabled):
            inside = gc.isenabled()
            built = [_Built() for _ in range(200_000)]
    finally:
        gc.callbacks.pop()
    assert len(built) == 200_000
    return gc.get_freeze_count() - frozen, len(collections), inside


def test_what_the_block_builds_is_frozen_without_a_collection() -> None:
    frozen, collected, inside = _frozen_while(True)
    assert not inside and collected == 0
    assert frozen >= 200_000
    assert gc.isenabled()


def test_disabled_it_changes_nothing() -> None:
    frozen, collected, inside = _frozen_while(False)
    assert inside and frozen == 0
    assert collected > 0  # Python's own young collections ran over what the block built


def test_the_collector_is_back_on_after_a_failing_block() -> None:
    with pytest.raises(RuntimeError), built_frozen(True):
        raise RuntimeError("restore failed")
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with built_frozen(True):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_paused_block_runs_no_collection_and_freezes_nothing() -> None:
    collections: list[int] = []
    gc.callbacks.append(lambda phase, info: collections.append(1) if phase == "start" else None)
    frozen = gc.get_freeze_count()
    try:
        with collector_paused():
            inside = gc.isenabled()
            built = [_Built() for _ in range(200_000)]
            ran = len(collections)
    finally:
        gc.callbacks.pop()
    assert len(built) == 200_000
    assert not inside and ran == 0 and gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_a_paused_block_leaves_the_collector_as_it_found_it() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("undecodable")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
