"""README.md and docs/*.md: every code block is runnable or checked, and what the prose names
(tests, settings, error codes, links) exists in the code.

The blocks that run here are run by tests/integration/test_docs.py. This module checks the
rest, which cannot run on this machine or in CI: `docker` and `kubectl` commands (no container
engine, no cluster: the files, secrets and CLI arguments they use are checked against the
repository), the reliability suite and the benchmarks (minutes each: their arguments are
checked against the real programs), and `make test`, which is what CI runs (`.ci/run`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli import build_parser
from cli.settings_reference import SETTINGS_CLASSES, prefix_of
from tests.docs_blocks import (
    DOCS,
    ELISION,
    LANGUAGES,
    MAKE_DEMO_PREFIX,
    ROOT,
    TS_EXAMPLE,
    Block,
    Command,
    all_blocks,
    block_kind,
    clean_env,
    commands,
    is_benchmark,
)
from tests.unit.test_deploy_manifests import K8S, exported_metrics, k8s_objects, load_yaml

README_LIMIT = 12 * 1024
# Named in docs/deploy.md as what Kubernetes would inject, and the settings would refuse.
NOT_SETTINGS = {"DSH_WRITER_PORT"}
SOURCE_DIRS = ("cli", "serve", "dsh", "schemas", "interpreters", "servicekit", "producers",
               "projectors", "deploy", "tests")  # fmt: skip


def _sources() -> Iterator[Path]:
    for top in SOURCE_DIRS:
        yield from (ROOT / top).rglob("*.py")
        yield from (ROOT / top).rglob("*.lua")


def _prose(path: Path) -> str:
    return path.read_text()


def _checked(block: Block) -> bool:
    return block.language == "sh" and block_kind(block) == "check"


# --- the blocks ------------------------------------------------------------------------------


def test_every_block_is_python_sh_or_text_and_all_of_one_kind() -> None:
    found = all_blocks()  # raises on a block never closed
    assert found
    for block in found:
        assert block.language in LANGUAGES, (
            f"{block.where}: ```{block.language or ''}: use python or sh (run or checked by the "
            "tests), ts (an excerpt of the TypeScript example) or text (output shown to the "
            "reader, pictures)"
        )
        if block.language == "sh":
            block_kind(block)  # raises on a block mixing commands run here and checked ones


def test_every_ts_block_is_an_excerpt_of_the_example_its_test_runs() -> None:
    """The TypeScript shown is the example's own text, so it type-checks and runs (the HTTP
    API's test runs the example): each run of lines between ``// …`` is in it verbatim."""
    example = TS_EXAMPLE.read_text()
    shown = [b for b in all_blocks() if b.language == "ts"]
    assert shown, "the README and docs/http-api.md show the TypeScript client"
    for block in shown:
        for part in block.code.split(ELISION + "\n"):
            assert part.strip("\n") in example, f"{block.where}: not in {TS_EXAMPLE.name}: {part}"


def test_make_test_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert [line for line in ci if line.startswith("make ")] == ["make test < /dev/null"]


def test_make_demo_is_setup_then_the_demo_once_the_venv_is_built() -> None:
    """What tests/integration/test_docs.py leaves out of `make demo` is building the venv."""
    result = subprocess.run(
        [*MAKE_DEMO_PREFIX, "-n", "BIN=/venv/bin", "demo"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.splitlines() == ["/venv/bin/dsh setup", "/venv/bin/dsh demo"]


# What a fresh Debian system has (its essential packages, the shell's builtins) or the venv.
# (make itself: the README's commands are make targets.)
BASE_PROGRAMS = {"[", "command", "echo", "exit", "fi", "id", "make", "mkdir", "mv", "rm", "touch"}
# The programs the README's prerequisites name, by the words it names them with.
PREREQUISITE_WORDS = {"python3": "Python", "apt-get": "`apt-get`"}


def _make_test_commands() -> list[str]:
    """Every shell command `make test` would run on a fresh clone, one logical line each."""
    result = subprocess.run(
        ["make", "-nB", "test"], cwd=ROOT, env=clean_env(), capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    joined = result.stdout.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line and not line.startswith("#")]


def _programs(line: str) -> set[str]:
    found = set()
    unquoted = re.sub(r""""[^"]*"|'[^']*'""", "''", line)
    for part in re.split(r"&&|\|\||[;|()!]|\b(?:if|then|else)\b", unquoted):
        words = [w for w in part.split() if not re.fullmatch(r"[A-Z_]+=\S*", w)]
        # The venvs are the Makefile's own (.venv/, and the floors check's).
        if words and not words[0].startswith((".venv/", ".state/floors-venv/", "'", ">")):
            found.add(words[0])
    return found


def test_make_test_needs_only_what_the_readme_names_or_the_makefile_installs() -> None:
    """On the machine the README describes, `make test` finds or installs every program it
    runs: each is in Debian's base system or the venv, named in the README's prerequisites,
    or installed from Debian's packages when missing (as root, which the README asks for)."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"On a fresh Debian machine with ([^:]+):", readme)
    assert found, "the README names what `make demo` and `make test` need"
    prerequisites = found[1]
    lines = _make_test_commands()
    installed = {
        program
        for line in lines
        if "apt-get install" in line
        for program in re.findall(r"command -v ([\w.-]+)", line)
    } - {"apt-get"}
    for program in set().union(*map(_programs, lines)) - BASE_PROGRAMS - installed:
        word = PREREQUISITE_WORDS.get(program, program)
        assert word in prerequisites, (
            f"make test runs {program}, which the README's prerequisites ({prerequisites}) do "
            "not name and the Makefile does not install"
        )
    if any(re.search(r"\bgo install\b", line) for line in lines):
        # Where it downloads from, for a reader behind a firewall.
        assert "Go module proxy" in readme


def _checked_commands() -> list[Any]:
    return [
        pytest.param(block, command, id=f"{block.where} {command.words[0]}")
        for block in all_blocks()
        if _checked(block)
        for command in commands(block)
        if command.words != ["make", "test"]
    ]


@pytest.mark.parametrize(("block", "command"), _checked_commands())
def test_a_command_that_cannot_run_here_uses_what_exists(block: Block, command: Command) -> None:
    program = command.words[0]
    if program == "pytest":
        _check_pytest(command)
    elif is_benchmark(command):
        _check_benchmark(command)
    elif program == "docker":
        _check_docker(command)
    elif program == "kubectl":
        _check_kubectl(command)
    else:
        raise AssertionError(f"{block.where}: no check for {command.text!r}")


def _check_pytest(command: Command) -> None:
    """The paths, marks and -k selections collect tests (running them takes minutes)."""
    args = [a for a in command.words[1:] if a != "-s"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=clean_env(**command.env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    collected = re.search(r"(\d+)(?:/\d+)? tests? collected", result.stdout)
    assert result.returncode == 0 and collected and int(collected[1]) > 0, (
        f"{command.text!r} collects nothing:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    )


def _check_benchmark(command: Command) -> None:
    """Every option the command passes is one the benchmark takes."""
    program = command.words[1:3] if command.words[1] == "-m" else command.words[1:2]
    result = subprocess.run(
        [sys.executable, *program, "--help"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for option in (w for w in command.words if w.startswith("--")):
        assert re.search(rf"{re.escape(option)}\b", result.stdout), (
            f"{command.text!r}: {option} is not an option of {' '.join(program)}"
        )


def _option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def _check_docker(command: Command) -> None:
    words = command.words
    if words[1] == "build":
        assert (ROOT / _option(words, "-f")).is_file(), command.text
        assert (ROOT / words[-1]).is_dir(), command.text
    elif words[1] == "run":
        args = [w for w in words[2:] if not w.startswith("--")]
        build_parser().parse_args(args[1:])  # after the image: the container's `dsh` arguments
    elif words[1] == "compose":
        assert (ROOT / _option(words, "-f")).is_file(), command.text
    else:
        raise AssertionError(f"no check for {command.text!r}")


def _secret_references() -> tuple[set[tuple[str, str]], set[str]]:
    """(Secret name, key) pairs env variables read, and the Secrets mounted as volumes."""
    keys: set[tuple[str, str]] = set()
    volumes: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("secretKeyRef")
            if isinstance(ref, dict):
                keys.add((ref["name"], ref["key"]))
            secret = node.get("secret")
            if isinstance(secret, dict) and "secretName" in secret:
                volumes.add(secret["secretName"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(k8s_objects())
    return keys, volumes


def _check_kubectl(command: Command) -> None:
    words = command.words
    namespace = load_yaml(K8S / "kustomization.yaml")["namespace"]
    if "-n" in words:
        assert _option(words, "-n") == namespace, command.text
        words = [w for i, w in enumerate(words) if w != "-n" and words[i - 1] != "-n"]
    if words[1:3] == ["create", "namespace"]:
        assert words[3] == namespace, command.text
    elif words[1:4] == ["create", "secret", "generic"]:
        name = words[4]
        keys, volumes = _secret_references()
        manifests = "".join(p.read_text() for p in K8S.glob("*.yaml"))
        for option in words[5:]:
            kind, _, value = option.partition("=")
            key = value.split("=", 1)[0]
            if kind == "--from-literal":
                assert (name, key) in keys, f"{command.text!r}: no manifest reads {name}/{key}"
            else:
                assert kind == "--from-file", command.text
                assert name in volumes and f"/{key}" in manifests, (
                    f"{command.text!r}: no manifest mounts {name} and reads its {key}"
                )
    elif words[1:3] == ["apply", "-k"]:
        assert (ROOT / words[3] / "kustomization.yaml").is_file(), command.text
    else:
        raise AssertionError(f"no check for {command.text!r}")


# --- what the prose names --------------------------------------------------------------------


def test_the_readme_stays_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move detail into docs/"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", _prose(path), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_somewhere(path: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(path)):
        if target.startswith(("http://", "https://")):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{path.name}: link to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(linked), f"{path.name}: no heading for {target}"


def _test_names() -> set[str]:
    return {
        name
        for source in (ROOT / "tests").rglob("test_*.py")
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)", source.read_text(), flags=re.M)
    }


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_named_as_proof_exists(path: Path) -> None:
    text = _prose(path)
    for file, name in re.findall(r"`?(tests/[\w/]+\.py)::(test_\w+)", text):
        source = ROOT / file
        assert source.is_file(), f"{path.name}: {file} does not exist"
        assert re.search(rf"def {name}\(", source.read_text()), f"{path.name}: {file}::{name}?"
    names = _test_names()
    for name in re.findall(r"`(test_\w+)`", text):
        assert name in names, f"{path.name}: no test is called {name}"


def _known_variables() -> set[str]:
    settings = {
        prefix_of(cls) + name.upper() for cls in SETTINGS_CLASSES for name in cls.model_fields
    }
    tests = {  # read by the tests, or by the local stack for them
        v
        for folder in ("tests", "deploy/local")
        for source in (ROOT / folder).rglob("*.py")
        for v in re.findall(r"DSH_(?:TEST|RELIABILITY)_[A-Z_]+", source.read_text())
    }
    return settings | tests


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_variable_named_is_a_setting(path: Path) -> None:
    known = _known_variables()
    for name in set(re.findall(r"\bDSH_[A-Z0-9_]*", _prose(path))):
        if name.endswith("_"):  # a prefix: DSH_KAFKA_*, DSH_LOCAL_*
            assert any(k.startswith(name) for k in known), f"{path.name}: {name}* names nothing"
        else:
            assert name in known | NOT_SETTINGS, f"{path.name}: {name} is not a setting"


def _string_literals() -> set[str]:
    return {
        literal
        for source in _sources()
        for literal in re.findall(r"""["']([A-Z][A-Z0-9_]*)["']""", source.read_text())
    }


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_named_is_one_the_code_raises(path: Path) -> None:
    """Error codes and other upper-case names in backticks (`KAFKA_UNREACHABLE`, `SASL_SSL`)
    are string literals of the code: a renamed code cannot linger in the docs."""
    literals = _string_literals()
    for name in set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", _prose(path))):
        if not name.startswith("DSH_"):
            assert name in literals, f"{path.name}: `{name}` is nowhere in the code"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_state_what_is_true_now_not_a_diary(path: Path) -> None:
    text = _prose(path)
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), f"{path.name}: a date; say what holds now"
    assert not re.search(r"\bround \d", text, flags=re.I), f"{path.name}: a benchmark round"


def _image_extras() -> set[str]:
    """The package extras the runtime stage of deploy/Dockerfile installs."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    runtime = dockerfile.rsplit("\nFROM ", 1)[1]
    return {
        extra.strip()
        for group in re.findall(r"pip install [^\n]*dsh-pipeline\[([\w, ]+)\]", runtime)
        for extra in group.split(",")
    }


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doc_says_the_image_lacks_an_extra_it_installs(path: Path) -> None:
    extras = _image_extras()
    assert "serve" in extras, "every image runs `dsh serve` (docs/deploy.md)"
    for line in _prose(path).splitlines():
        named = set(re.findall(r"dsh-pipeline\[(\w+)\]", line)) & extras
        lacks = re.search(r"image (?:does not|doesn't|lacks)|not (?:yet )?in the image", line)
        assert not (named and lacks), f"{path.name}: the image installs {sorted(named)}: {line}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_metric_named_is_exported_with_the_labels_named(path: Path) -> None:
    """`dsh_…` names (and `{label,…}` after them) are what the services expose: a renamed
    metric or label cannot linger in the docs, where an operator copies it into a query."""
    exported = exported_metrics()
    for name, labels in re.findall(r"\b(dsh_[a-z0-9_]+)(?:\{([a-z_,]+)\})?", _prose(path)):
        # A histogram is named by its base name; its samples are _bucket, _sum and _count.
        found = exported.get(name, exported.get(f"{name}_bucket"))
        assert found is not None, f"{path.name}: {name} is no metric a service exports"
        named = set(filter(None, labels.split(",")))
        assert named <= found, f"{path.name}: {name} has no label {sorted(named - found)}"
