"""`dsh` as a newcomer types it: bare, with a typo, with a nonsense value, piped into `head`.
Each runs the real command in a subprocess; none needs Kafka or Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parse that got through would act in the working directory (``export dir``)."""
    monkeypatch.chdir(tmp_path)


def _dsh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=60
    )


def test_dsh_alone_prints_the_help() -> None:
    done = _dsh()
    assert done.returncode == 0, done.stderr
    assert "dsh demo" in done.stdout and "dsh verify SESSION" in done.stdout


def test_an_unknown_flag_is_named() -> None:
    done = _dsh("--bogus")
    assert done.returncode == 2
    assert "--bogus" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "s", "--timeout", "-1"),
        ("verify", "s", "--timeout", "0"),
        ("replay", "--timeout", "nan"),
        ("import", "f.jsonl", "--timeout", "inf"),
        ("export", "dir", "--timeout", "-5"),
        ("demo", "--timeout", "-1"),
        ("tail", "s", "-n", "-2"),
    ],
)
def test_a_nonsense_number_is_refused_naming_the_option(args: tuple[str, ...]) -> None:
    done = _dsh(*args)
    assert done.returncode == 2, done.stderr
    option = args[-2]
    # The option's own type refused the value, not some other argparse error.
    assert f"argument {option}" in done.stderr and ": must be" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_closed_pipe_ends_quietly() -> None:
    """`dsh settings | head -1`: the reader goes away; no BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "settings"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line, as `head -0` would be
    err = proc.stderr.read()
    assert proc.wait(60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_kafka_names_the_tools_it_runs() -> None:
    done = _dsh("kafka", "no-such-tool")
    assert done.returncode == 2
    assert "consumer-groups" in done.stderr and "Traceback" not in done.stderr
