"""Waiting, bounded, for something another process or thread does."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float = 30.0,
    what: str = "",
    explain: Callable[[], str] | None = None,
) -> float:
    """Poll until ``condition()`` holds; returns the seconds it took. Fails after
    ``timeout_s`` naming ``what``, with ``explain()`` (what is still missing) if given."""
    started = time.monotonic()
    deadline = started + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            detail = f": {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{detail}")
        time.sleep(0.05)
    return time.monotonic() - started
