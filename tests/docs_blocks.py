"""The fenced code blocks of README.md and docs/*.md, for the tests that run or check them.

A block is ```python (run), ```sh (run with bash, or checked: see :func:`kind`), ```ts (an
excerpt of docs/examples/http-client.ts, which its own test type-checks and runs) or ```text
(output or a picture shown to the reader: not code). tests/unit/test_docs.py checks every
block's language and the blocks that cannot run here; tests/integration/test_docs.py runs the
rest against a real pipeline.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
LANGUAGES = frozenset({"python", "sh", "ts", "text"})
TS_EXAMPLE = ROOT / "docs" / "examples" / "http-client.ts"
ELISION = "// …"  # in a ```ts block: lines of the example left out here

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`]*)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

# What a command needs that this machine (and CI) does not have, so it is checked, not run:
# a container engine or a Kubernetes cluster; the reliability suite and the benchmarks, which
# take minutes each (their arguments are checked against the real programs instead).
ENGINES = frozenset({"docker", "kubectl"})

Kind = Literal["run", "check", "ci"]

# `make demo` with the venv taken as built (`make test`, which CI runs first, built it; here
# building one would replace the shared venv) and BIN= the directory whose `dsh` to run: what
# is left of the recipe is exactly `dsh setup` then `dsh demo` (tests/unit/test_docs.py).
MAKE_DEMO_PREFIX = ("make", "-o", ".venv/.installed-stamp", "-o", ".venv/.native-stamp")
# Left out of the environment of what the tests run: a reader's shell has none of the test's
# settings, and under `make test` make's own variables would turn `make` into a sub-make.
INHERITED = ("DSH_", "PYTEST_", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Command:
    text: str  # as written, continuation lines joined
    env: dict[str, str]  # VAR=value assignments before the program
    words: list[str]  # the program and its arguments, comments dropped


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}, **extra}


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{path.relative_to(ROOT)}:{i + 1}: a code block is never closed")
        found.append(Block(path, i + 1, opening["info"].strip(), "\n".join(body) + "\n"))
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks(path)]


def commands(block: Block) -> list[Command]:
    """The shell commands of a ``sh`` block, one per line after joining continuations."""
    out = []
    for text in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(text, comments=True)
        env: dict[str, str] = {}
        while words and _ASSIGNMENT.match(words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        if words:
            out.append(Command(text, env, words))
    return out


def kind(command: Command) -> Kind:
    """``run``: the integration test runs it; ``check``: it cannot run here, and the unit test
    checks what it uses; ``ci``: `make test`, which is what CI itself runs."""
    program = command.words[0]
    if command.words == ["make", "test"]:
        return "ci"
    if program in ENGINES or program == "pytest" or is_benchmark(command):
        return "check"
    return "run"


def is_benchmark(command: Command) -> bool:
    words = command.words
    if words[0] != "python" or len(words) < 2:
        return False
    # The soak is a load run of its own, minutes long like a benchmark.
    module = words[2] if words[1] == "-m" and len(words) > 2 else ""
    return words[1].startswith("bench/") or module.startswith(("bench.", "tests.reliability.soak"))


def block_kind(block: Block) -> Kind:
    """One kind per block (`make test` goes with anything): a reader can tell which blocks
    this machine ran, and a failure names a block that is all of one kind."""
    kinds = {kind(c) for c in commands(block)} - {"ci"}
    if len(kinds) > 1:
        raise ValueError(f"{block.where}: mixes commands that run here with ones that cannot")
    return kinds.pop() if kinds else "ci"
