"""Cycle-collector tuning for the long-running services (writer, projectors)."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def young_gc_threshold(threshold: int) -> Iterator[None]:
    """Collect the young generation every ``threshold`` allocations instead of Python's 700
    while the block runs (0 changes nothing). A service's batch makes tens of thousands of
    short-lived containers next to a large long-lived heap (cached sessions), and at 700 the
    collector rescans them over and over: a third of the CPU per event in both services."""
    old = gc.get_threshold()
    if threshold > 0:
        gc.set_threshold(threshold, *old[1:])
    try:
        yield
    finally:
        if threshold > 0 and gc.get_threshold()[0] == threshold:
            gc.set_threshold(*old)


@contextlib.contextmanager
def built_frozen(enabled: bool) -> Iterator[None]:
    """Run the block with the cycle collector off, then freeze what it built (``enabled``
    False: nothing changes). A writer's restore makes millions of objects that all survive:
    young collections would walk them again and again (a tenth of the restore's time) and an
    older one all at once later. For code that makes no reference cycles only: any it made
    stays frozen."""
    if not enabled or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off while the block runs, then as it was. For a short block that
    builds many acyclic objects meant to outlive it (a client decoding a read's reply): with
    the collector on, the collections their allocation triggers walk them, and a process's
    large heap, over and over, and find no garbage among them. The block must be short: the
    pause holds for every thread."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_pause_hooked = False


def observe_gc_pauses(histogram: Any) -> None:
    """Time every cycle-collector run into ``histogram`` (labelled by generation): a full
    collection over a large heap of cached sessions stops the whole process, and shows up as
    latency that no other metric explains. Installed once per process."""
    global _pause_hooked
    if _pause_hooked:
        return
    _pause_hooked = True
    children = [histogram.labels(str(g)) for g in range(3)]
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            children[info["generation"]].observe(time.perf_counter() - started[0])

    gc.callbacks.append(on_gc)
