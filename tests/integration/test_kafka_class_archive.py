"""Kafka's class archive (AppCDS, ``deploy.local.kafka.class_archive``): made once beside the
jars, mapped by every JVM of the local stack, and harmless when a JVM cannot use it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from deploy.local.kafka import class_archive, ensure_kafka_jars, tool_command
from deploy.local.settings import LocalStackSettings


def _linked_jars(tmp_path: Path) -> LocalStackSettings:
    """The stack's jars, linked into a folder of the test's own (its archive is the test's)."""
    shared = ensure_kafka_jars(LocalStackSettings())
    libs = tmp_path / "kafka" / "libs"
    libs.mkdir(parents=True)
    for jar in shared.iterdir():
        os.symlink(jar, libs / jar.name)
    return LocalStackSettings(jars_dir=libs, state_dir=tmp_path / "state")


def _version(settings: LocalStackSettings) -> subprocess.CompletedProcess[str]:
    argv = tool_command(settings, "topics", ["--version"])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_the_archive_is_made_once_and_every_jvm_maps_it(tmp_path: Path) -> None:
    settings = _linked_jars(tmp_path)
    archive = class_archive(ensure_kafka_jars(settings))
    assert archive.exists() and archive.stat().st_size > 1_000_000
    made = archive.stat().st_mtime_ns
    argv = tool_command(settings, "topics", ["--version"])
    assert f"-XX:SharedArchiveFile={archive}" in argv
    assert archive.stat().st_mtime_ns == made  # not made again

    at = argv.index("-cp")  # after the archive's own quieting of the cds log
    mapped = subprocess.run(
        [*argv[:at], "-Xlog:cds", *argv[at:]], capture_output=True, text=True, check=False
    )
    assert mapped.returncode == 0, mapped.stderr
    assert "Mapped dynamic region" in mapped.stdout


def test_an_archive_the_jvm_cannot_use_changes_nothing_it_prints(tmp_path: Path) -> None:
    settings = _linked_jars(tmp_path)
    expected = _version(settings)
    class_archive(settings.kafka_jars_dir()).write_bytes(b"not an archive" * 1000)
    run = _version(settings)
    assert run.returncode == expected.returncode == 0
    assert (run.stdout, run.stderr) == (expected.stdout, expected.stderr)
    assert "4.1.1" in run.stdout
