"""SIGUSR1 makes a service write every thread's stack and go on (deploy/stacks.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from deploy.stacks import DUMP_SIGNAL

REPO = Path(__file__).resolve().parents[2]

_PROGRAM = """
import sys, threading, time
from deploy.stacks import dump_stacks_on_signal

def waiting_in_a_helper_thread():
    time.sleep(60)

def waiting_in_the_main_thread():
    print("ready", flush=True)
    time.sleep(3)
    print("still running", flush=True)

dump_stacks_on_signal()
threading.Thread(target=waiting_in_a_helper_thread, daemon=True).start()
waiting_in_the_main_thread()
"""


def test_the_signal_dumps_every_threads_stack_and_the_process_goes_on() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _PROGRAM],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        time.sleep(0.2)  # into the sleep
        process.send_signal(DUMP_SIGNAL)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "still running" in out
    assert "waiting_in_the_main_thread" in err
    assert "waiting_in_a_helper_thread" in err
