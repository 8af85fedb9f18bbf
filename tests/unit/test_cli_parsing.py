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


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("export", "dir", "--output", "x.jsonl"), "--output"),
        (("export", "--format", "jsonl", "s", "--codec", "zstd"), "--codec"),
        (("export", "--format", "jsonl", "s", "--from-beginning"), "--from-beginning"),
    ],
)
def test_an_export_option_its_format_would_ignore_is_refused(
    args: tuple[str, ...], option: str
) -> None:
    """`dsh export DIR --output F` exported the whole topic into DIR and never wrote F."""
    done = _dsh(*args, "--timeout", "1")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dsh: error [EXPORT_OPTION]: ") and option in last, done.stderr


def test_export_of_one_session_keeps_to_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dsh export --format jsonl SESSION --timeout 1` waited its own 10 s for the broker."""
    from deploy.local.processes import free_ports

    (port,) = free_ports(1)
    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    done = _dsh("export", "--format", "jsonl", "s", "--timeout", "1")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "[KAFKA_UNREACHABLE]" in last and "answered in 1s" in last, done.stderr
