"""The call watchdog (servicekit/watchdog.py): a call far past its timeout ends the process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from servicekit.watchdog import STUCK_EXIT_CODE, CallWatchdog

REPO = Path(__file__).resolve().parents[2]


def _recording(
    grace_s: float = 0.2,
) -> tuple[CallWatchdog, list[tuple[str, float, float]], threading.Event]:
    verdicts: list[tuple[str, float, float]] = []
    judged = threading.Event()

    def on_stuck(call: str, running_s: float, bound_s: float) -> None:
        verdicts.append((call, running_s, bound_s))
        judged.set()

    return CallWatchdog(grace_s, on_stuck, check_every_s=0.02), verdicts, judged


def test_a_call_that_returns_within_its_timeout_and_grace_is_left_alone() -> None:
    watchdog, verdicts, _ = _recording(grace_s=2.0)  # room for a sleep that overshoots
    try:
        for _ in range(3):
            with watchdog.watch("commit_transaction", 0.1):
                time.sleep(0.15)  # past its timeout, within the grace
        time.sleep(0.3)
    finally:
        watchdog.close()
    assert verdicts == []


def test_a_call_past_its_timeout_and_grace_is_judged_once_with_its_name() -> None:
    watchdog, verdicts, judged = _recording()
    stuck = threading.Event()

    def hang() -> None:
        with watchdog.watch("send_offsets_to_transaction", 0.1):
            stuck.wait(5)

    caller = threading.Thread(target=hang)
    caller.start()
    try:
        assert judged.wait(5)
        time.sleep(0.1)
    finally:
        stuck.set()
        caller.join()
        watchdog.close()
    [(call, running_s, bound_s)] = verdicts
    assert call == "send_offsets_to_transaction"
    assert bound_s == 0.1
    assert running_s > 0.3


def test_grace_zero_turns_it_off() -> None:
    verdicts: list[str] = []
    threads_before = set(threading.enumerate())
    watchdog = CallWatchdog(0.0, lambda call, *_: verdicts.append(call), check_every_s=0.01)
    started = set(threading.enumerate()) - threads_before
    with watchdog.watch("flush", 0.0):
        time.sleep(0.1)
    watchdog.close()
    assert verdicts == []
    # Its own threads only: another test's watchdog may still be winding down.
    assert not any(t.name == "dsh-watchdog" for t in started)


def test_close_ends_the_checking_thread() -> None:
    threads_before = set(threading.enumerate())
    watchdog, _, _ = _recording()
    [thread] = set(threading.enumerate()) - threads_before
    watchdog.close()
    assert not thread.is_alive()


_STUCK_PROGRAM = """
import logging, threading
from servicekit.watchdog import CallWatchdog

logging.basicConfig(level=logging.INFO)
watchdog = CallWatchdog(0.2, check_every_s=0.05)

def waiting_for_the_coordinator():
    with watchdog.watch("send_offsets_to_transaction", 0.1):
        threading.Event().wait()

waiting_for_the_coordinator()
"""


def test_the_default_verdict_logs_the_call_and_the_stacks_and_exits_with_its_code() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _STUCK_PROGRAM],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == STUCK_EXIT_CODE, done.stderr
    assert "send_offsets_to_transaction has not returned" in done.stderr
    assert "waiting_for_the_coordinator" in done.stderr  # the stuck thread's stack
