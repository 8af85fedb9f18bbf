"""Where a service process spends its time under load: py-spy samples it (``py-spy record
--format raw``: one line per distinct stack with its sample count, idle threads left out) and
the frames are ranked by the share of samples they appear in."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LINE = re.compile(r":\d+\)$")


@contextmanager
def sampled(pid: int, out: Path, rate: int = 200) -> Iterator[None]:
    """py-spy samples process ``pid`` (its threads, native frames left out) while the block
    runs; the stacks go to ``out``."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("--profile needs py-spy on the PATH (pip install py-spy)")
    argv = [py_spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    recorder = subprocess.Popen(
        [*argv, "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        recorder.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        recorder.wait(60)


def ranked(raw: Path, top: int = 25) -> list[tuple[str, float]]:
    """The functions in the most samples, each with the share of all samples it is in."""
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        # A function once however many of its lines the samples fall on: "name (file:line)".
        for frame in {LINE.sub(")", f) for f in stack.split(";")}:
            inclusive[frame] += int(count)
    return [(frame, n / total) for frame, n in inclusive.most_common(top)] if total else []


def profile(pid: int, out: Path, load: Callable[[], Any]) -> list[tuple[str, float]]:
    """``load()`` run while process ``pid`` is sampled, and its top frames."""
    with sampled(pid, out):
        load()
    return ranked(out)
