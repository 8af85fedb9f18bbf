"""Local servers' process handles: started, recognised by their pid file, stopped."""

from __future__ import annotations

import sys
from pathlib import Path

from deploy.local.processes import ManagedProcess


def test_a_process_counts_as_running_the_moment_start_returns(tmp_path: Path) -> None:
    # Right after exec the kernel shows an empty command line for a moment; start() used to
    # return inside it, and a readiness check then took a healthy new server for a dead one.
    # Without the wait, one of the first 6 starts caught it in each of 5 runs.
    started: list[ManagedProcess] = []
    try:
        for i in range(30):
            marker = str(tmp_path / f"server-{i}.marker")
            process = ManagedProcess(
                f"sleeper {i}", tmp_path / f"{i}.pid", tmp_path / f"{i}.log", marker=marker
            )
            process.start([sys.executable, "-c", "import time; time.sleep(30)", marker])
            started.append(process)
            assert process.is_running(), f"start {i} returned before the process was ours"
    finally:
        for process in started:
            process.stop(timeout_s=5)
    assert not any(process.is_running() for process in started)
