"""Every runnable code block of README.md and docs/*.md, run as a reader would run it.

The blocks run against the local stack `dsh up` makes, on free ports with a private state
dir: the pipeline a reader of these docs has after `make demo` (real Kafka, Redis, the writer
and the three projectors as processes). Python blocks run with `python -c`, shell blocks with
bash (`-e`, so every command must succeed), in a scratch directory of each document's own that
its blocks share, in document order, with `dsh` and `python` on the PATH meaning this
checkout's and DSH_KAFKA_* / DSH_REDIS_* pointing at the stack.

The two commands of the README:

- `make demo` really runs, through the Makefile, on that stack: `make` with the venv's stamps
  taken as made (`make test` built the venv before this test runs; here, building one would
  replace the shared one) and BIN= a directory whose `dsh` is this checkout's. What the recipe
  then runs is exactly `dsh setup` and `dsh demo` (tests/unit/test_docs.py asserts it), and the
  demo starts the stack from cold, as on a fresh machine whose Kafka jars are downloaded.
- `make test` is not run here: it is what CI runs (`.ci/run`, asserted by
  tests/unit/test_docs.py), this test among everything else.

Blocks that cannot run on this machine (docker, kubectl) or take minutes (the reliability
suite, the benchmarks) are checked by tests/unit/test_docs.py instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.local.processes import free_port_block, free_ports
from tests.docs_blocks import (
    DOCS,
    MAKE_DEMO_PREFIX,
    ROOT,
    Block,
    block_kind,
    blocks,
    clean_env,
    commands,
)

METRICS_PORTS = 4  # the writer and the three projectors


@dataclass(frozen=True)
class Stack:
    env: dict[str, str]
    bin: Path


def _dsh(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(stack.bin / "dsh"), *args],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The environment of a reader's shell; the stack itself is started by `make demo` (or by
    `dsh up` for a document tested on its own), and stopped at the end."""
    home = tmp_path_factory.mktemp("docs-stack")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    for name, command in (("dsh", f'"{sys.executable}" -m cli'), ("python", f'"{sys.executable}"')):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        script.chmod(0o755)
    kafka_port, controller_port, redis_port = free_ports(3)
    env = clean_env()
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
        DSH_LOCAL_STATE_DIR=str(home / "state"),
        DSH_LOCAL_KAFKA_PORT=str(kafka_port),
        DSH_LOCAL_CONTROLLER_PORT=str(controller_port),
        DSH_LOCAL_REDIS_PORT=str(redis_port),
        DSH_LOCAL_METRICS_PORT=str(free_port_block(METRICS_PORTS)),
        DSH_LOCAL_PARTITIONS="2",
        DSH_KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{kafka_port}",
        DSH_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
    )
    running = Stack(env, bin_dir)
    try:
        yield running
    finally:
        _dsh(running, "down")


def _script(block: Block, stack: Stack) -> str:
    """The block as bash runs it: `make demo` pointed at this checkout's `dsh`, `make test`
    left to CI (see the module docstring)."""
    lines = []
    for command in commands(block):
        if command.words == ["make", "test"]:
            continue
        if command.words == ["make", "demo"]:
            lines.append(" ".join([*MAKE_DEMO_PREFIX, "-C", str(ROOT), f"BIN={stack.bin}", "demo"]))
        else:
            lines.append(command.text)
    return "\n".join(lines) + "\n"


def _run(block: Block, stack: Stack, cwd: Path) -> None:
    if block.language == "python":
        argv = [sys.executable, "-c", block.code]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", _script(block, stack)]
    result = subprocess.run(
        argv, cwd=cwd, env=stack.env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, (
        f"{block.where} exited {result.returncode}:\n{argv[-1]}\n--- stdout\n"
        f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    )


def _runnable(path: Path) -> list[Block]:
    return [
        b
        for b in blocks(path)
        if b.language == "python" or (b.language == "sh" and block_kind(b) == "run")
    ]


# README first: its `make demo` starts the stack the other documents' blocks use.
@pytest.mark.timeout(900)  # a cold start of Kafka on a loaded machine, then the blocks
@pytest.mark.parametrize(
    "path", [p for p in DOCS if _runnable(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_block_runs(path: Path, stack: Stack, tmp_path: Path) -> None:
    if path.name != "README.md":
        up = _dsh(stack, "up")  # idempotent: the stack `make demo` started is kept
        assert up.returncode == 0, up.stderr
    for block in _runnable(path):
        _run(block, stack, tmp_path)
