"""DSH_WRITER_GC_FREEZE against the real broker. The writer moves what survives each young
collection to the permanent generation, which the collector never walks: cyclic garbage that
got there stays until a recovery sweeps the heap. So nothing the writer does per command or
per recovery may make reference cycles. After a load with rejections of each origin and a
recovery from a failed commit, the frozen objects are handed back to the collector, and what
it finds unreachable must be only what this process's own set-up and teardown left (the
in-process writer and clients, compiled codecs), none of the writer's state, frames or
errors. The recovery's own sweep of the heap must find every partition's state already gone,
or it would walk it.

Found here before they were fixed: each rejection's traceback held the writer's frames and,
through their locals, the outcome holding the rejection (16 sets of frames and 10 sessions'
state in one run of 100 rejections of each kind); and a failed commit, raised again from its
future by each reader, held the recovery's frame and through it the failed transaction's
partition states."""

from __future__ import annotations

import collections
import gc
import types
import uuid

import pytest

import dsh
from producers import SessionClient
from producers.writer import Writer
from producers.writer.state import PartitionState, SessionState
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    REPO,
    SESSIONS,
    CommitProbe,
    load_in_order,
    running_writer,
    writer_settings,
)
from tests.support.builders import user

# Of each kind. At gc_threshold 700 a young collection comes during most commands: a few
# rejections of each kind are enough for one to catch its cycle alive and freeze it.
REJECTED = 10


def _rejections(topics: KafkaSettings, sessions: list[str]) -> collections.Counter[str]:
    """Rejected appends of three origins, each by the writer: its limits, the core, a
    wrong expected_seq."""
    codes: collections.Counter[str] = collections.Counter()
    with SessionClient(settings=topics, timeout=30) as client:
        for i in range(REJECTED):
            sid = sessions[i % len(sessions)]
            for kind in ("too large", "core", "conflict"):
                try:
                    if kind == "too large":
                        big = user(f"big{i}", "x" * 600_000)  # over the writer's 512 KiB
                        client.append(sid, "user/message", big, surface_op="append")
                    elif kind == "core":
                        client.append(sid, "user/message", user(f"u{i}"))  # no surface op
                    else:
                        client.append(
                            sid, "user/message", user(f"c{i}"), surface_op="append", expected_seq=0
                        )
                except dsh.SessionError as exc:
                    codes[exc.code] += 1
    return codes


def _project_frames(garbage: list[object]) -> list[str]:
    return [
        f"{f.f_code.co_filename}:{f.f_code.co_name}"
        for f in garbage
        if isinstance(f, types.FrameType) and f.f_code.co_filename.startswith(str(REPO))
    ]


def test_a_freezing_writer_freezes_and_its_work_leaves_no_cyclic_garbage(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = [f"freeze-{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]
    CommitProbe(monkeypatch, fail_commit=5)  # one recovery: abort, restore, rewind
    held_at_sweep: list[int] = []
    sweep = Writer._sweep_frozen_heap

    def sweep_and_count(writer: Writer) -> None:
        """The recovery's sweep, then how many partition and session states are still
        alive: none should be (the recovery dropped them all), else the sweep walks them."""
        sweep(writer)
        held_at_sweep.append(
            sum(isinstance(o, PartitionState | SessionState) for o in gc.get_objects())
        )

    monkeypatch.setattr(Writer, "_sweep_frozen_heap", sweep_and_count)
    # Young collections every 700 allocations (Python's own), so the writer freezes often.
    gc.collect()
    frozen_before = gc.get_freeze_count()
    try:
        with running_writer(topics, writer_settings(gc_freeze=True, gc_threshold=700)):
            load_in_order(topics, sessions)
            codes = _rejections(topics, sessions)
            assert gc.get_freeze_count() > frozen_before  # it did freeze
    finally:
        gc.unfreeze()
    assert codes == {
        "COMMAND_TOO_LARGE": REJECTED,
        "SURFACE_OP_REQUIRED": REJECTED,
        "EXPECTED_SEQ_MISMATCH": REJECTED,
    }
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        unreachable = gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    kinds = collections.Counter(type(o).__name__ for o in garbage)
    assert _project_frames(garbage) == [], kinds.most_common(20)
    assert not [o for o in garbage if isinstance(o, PartitionState | SessionState)], kinds
    assert not [o for o in garbage if isinstance(o, BaseException)], kinds
    assert not [o for o in garbage if isinstance(o, dsh.Event)], kinds
    # What is left is this process's own, whatever the number of commands: 150-600 objects
    # when measured.
    assert unreachable < 2000, kinds.most_common(20)
    # The recovery swept a heap it had emptied of partition state.
    assert held_at_sweep and not any(held_at_sweep), held_at_sweep
