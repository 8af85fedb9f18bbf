"""The progress line of the long commands (import, export, replay, verify): a bar redrawn in
place on stderr, with the rate and the time left, shown only to a person at a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from servicekit.progress import Progress


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def progress_bar(
    unit: str,
    stream: TextIO | None = None,
    width: int = 30,
    clock: Callable[[], float] = time.perf_counter,
) -> Progress:
    """``show(done, total)``: redraws at most ten times a second. ``total`` may be an estimate
    (offsets count transaction markers too); the caller's last call passes the real count as
    both, which fills the bar and ends its line, so what is printed next starts on its own."""
    out = stream or sys.stderr
    started = clock()
    last = [float("-inf")]

    def show(done: int, total: int) -> None:
        now = clock()
        finished = done >= total
        if not finished and now - last[0] < 0.1:
            return
        last[0] = now
        elapsed = now - started
        filled = width if total <= 0 else min(width, width * done // total)
        rate = done / elapsed if elapsed > 0 else 0.0
        if finished:
            timing = f"in {_duration(elapsed)}"
        elif rate > 0:
            timing = f"{_duration((total - done) / rate)} left"
        else:
            timing = "time left unknown"
        out.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} {unit} "
            f"{rate:,.0f}/s, {timing}\033[K"
        )
        if finished:
            out.write("\n")
        out.flush()

    return show


def for_a_person(unit: str, wanted: bool = True) -> Progress | None:
    """A bar only for a person watching: a redrawn line is noise in a log file or a pipe."""
    return progress_bar(unit) if wanted and sys.stderr.isatty() else None
