"""SIGUSR1 makes a service write every thread's stack and go on (servicekit/stacks.py)."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servicekit.stacks import DUMP_SIGNAL, dump_stacks_on_signal

REPO = Path(__file__).resolve().parents[2]

_PROGRAM = """
import sys, threading, time
from servicekit.stacks import dump_stacks_on_signal

def waiting_in_a_helper_thread():
    time.sleep(60)

def waiting_in_the_main_thread():
    print("ready", flush=True)
    sys.stdin.readline()  # until the test has sent the signal, however late that is
    print("still running", flush=True)

dump_stacks_on_signal()
threading.Thread(target=waiting_in_a_helper_thread, daemon=True).start()
waiting_in_the_main_thread()
"""


def test_the_signal_dumps_every_threads_stack_and_the_process_goes_on() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _PROGRAM],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(DUMP_SIGNAL)
        # The dump is written from the signal handler, before the process reads on.
        out, err = process.communicate("go on\n", timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "still running" in out
    assert "waiting_in_the_main_thread" in err
    assert "waiting_in_a_helper_thread" in err


def test_a_service_hung_while_it_starts_can_be_looked_into() -> None:
    """Every ``dsh`` process installs the handler first: here a projector whose Redis accepts
    the connection and never answers, so it waits in its start-up for ever."""
    with socket.socket() as black_hole:
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen()
        port = black_hole.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
        env |= {
            "DSH_REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "DSH_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "DSH_PROJECTOR_METRICS_PORT": "0",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "project", "audit"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            accepted, _ = black_hole.accept()  # the projector has connected: now it waits
            time.sleep(0.5)
            process.send_signal(DUMP_SIGNAL)
            time.sleep(1.0)
            assert process.poll() is None, "the signal ended the process"
        finally:
            process.kill()
            out, _ = process.communicate(timeout=30)
            accepted.close()
    assert "projector audit starting" in out
    assert "load_all" in out, out[-2000:]  # where it waits: loading the scripts into Redis


def test_a_stand_in_for_stderr_leaves_the_signal_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI called in process (tests, a host) with a stderr that has no file descriptor."""
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert dump_stacks_on_signal() is False
