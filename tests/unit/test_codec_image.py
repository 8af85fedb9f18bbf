"""The production image decodes with the native readers the benchmarks measure.

No container engine runs here, so this takes ``deploy/Dockerfile`` apart and runs its Python
steps: the build stage compiles the readers before it builds the wheels, the wheel the runtime
stage installs holds the compiled module, and the runtime stage's check passes on what that
wheel installs (and fails on a wheel without it).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from schemas import native

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
SO = "_native_codec"


def _stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), one list per stage."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    stages: list[list[str]] = []
    for raw in text.splitlines():
        line = " ".join(raw.split())
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def _runs(stage: list[str]) -> list[str]:
    return [line.removeprefix("RUN ") for line in stage if line.startswith("RUN ")]


def _index(runs: list[str], command: str) -> int:
    found = [i for i, run in enumerate(runs) if command in run]
    assert found, f"no RUN step runs {command!r}"
    return found[0]


def test_the_build_stage_compiles_the_readers_before_it_builds_the_wheels() -> None:
    build, runtime = _stages()
    runs = _runs(build)
    compiler = _index(runs, "apt-get install")
    assert "gcc" in runs[compiler].split()
    extra = _index(runs, 'pip install --no-cache-dir ".[native]"')
    compiled = _index(runs, "python -m schemas.native_build --require")
    wheels = _index(runs, "pip wheel")
    assert compiler < extra < compiled < wheels
    # The runtime stage installs those wheels only, and refuses an install without the module.
    install = _index(_runs(runtime), '--find-links /wheels "dsh-pipeline[serve]"')
    assert install < _index(_runs(runtime), "python -m schemas.native_build --check")
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert f"schemas/{SO}*" in ignored, "a local build must not leak into the image"


def _wheel_argv(wheels: Path) -> list[str]:
    """The build stage's ``pip wheel`` step, offline: the package only, from this venv."""
    (build, _) = _stages()
    argv = shlex.split(_runs(build)[_index(_runs(build), "pip wheel")])
    # The package with the `serve` extra's wheels, so that the image runs `dsh serve`.
    assert argv[:2] == ["pip", "wheel"] and argv[-1] == ".[serve]" and "/wheels" in argv
    argv = [wheels.as_posix() if a == "/wheels" else a for a in argv]
    return [sys.executable, "-m", *argv[:-1], "--no-deps", "--no-build-isolation", argv[-1]]


def _context(tmp: Path, with_module: bool) -> Path:
    """What the build stage copies, plus (as its native build step leaves it) the module."""
    (build, _) = _stages()
    src = tmp / "src"
    src.mkdir()
    for line in build:
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            for name in sources:
                target = src / dest / Path(name).name if dest.endswith("/") else src / dest
                if (ROOT / name).is_dir():
                    skip = shutil.ignore_patterns("__pycache__", f"{SO}*")  # as .dockerignore
                    shutil.copytree(ROOT / name, target, ignore=skip)
                else:
                    shutil.copy(ROOT / name, target)
    if with_module:
        built = sorted((ROOT / "schemas").glob(f"{SO}*.so"))
        assert built, "schemas/_native_codec is not built: run `make setup`"
        shutil.copy(built[0], src / "schemas")
    return src


def _build_and_check(tmp: Path, with_module: bool) -> tuple[list[str], int, str]:
    src = _context(tmp, with_module)
    wheels = tmp / "wheels"
    result = subprocess.run(
        _wheel_argv(wheels), cwd=src, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = wheels.glob("dsh_pipeline-*.whl")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(site)
    # The runtime stage's check, on the installed package alone (not this checkout).
    (_, runtime) = _stages()
    check = shlex.split(_runs(runtime)[_index(_runs(runtime), "schemas.native_build --check")])
    # -S: no .pth files, so no editable install of a checkout answers for what the wheel
    # lacks; the dependencies from this venv's site-packages, after the wheel's files.
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sorted(deps)])}
    ran = subprocess.run(
        [sys.executable, "-S", *check[1:]],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return names, ran.returncode, ran.stdout + ran.stderr


def test_the_wheel_ships_the_native_readers_and_the_runtime_check_passes(tmp_path: Path) -> None:
    pytest.importorskip("Cython", reason="the native extra is not installed: nothing is built")
    names, code, output = _build_and_check(tmp_path, with_module=True)
    assert [n for n in names if n.startswith(f"schemas/{SO}") and n.endswith(".so")]
    assert {f"schemas/{n}" for n in ("session_event.avsc", "vocabulary.avsc")} <= set(names)
    assert code == 0, output
    assert "native" in output and str(tmp_path / "site") in output


def test_the_runtime_check_refuses_a_wheel_without_them(tmp_path: Path) -> None:
    names, code, output = _build_and_check(tmp_path, with_module=False)
    assert not [n for n in names if SO in n]
    assert code == 1, output
    assert "no native build" in output


def test_a_process_says_which_readers_it_decodes_with() -> None:
    assert native.describe().startswith(("native (", "Python ("))
    with native.disabled():
        assert native.describe().startswith("Python")
