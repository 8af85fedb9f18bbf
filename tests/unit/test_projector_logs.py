"""Projector log lines that concern one session carry ``session`` and ``partition`` fields (a
DLQ'd record, a session found blocked, a rebuild), as the writer's lines do; no services."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest

import dsh
from projectors.errors import PoisonRecordError
from projectors.keys import Keys
from projectors.records import Poison, Record
from projectors.runtime import Runtime
from projectors.runtime import poison as poison_module
from projectors.runtime import rebuilds as rebuilds_module
from projectors.runtime.batches import BLOCKED
from projectors.runtime.poison import DeadLetter
from projectors.runtime.sessions import Entry
from projectors.settings import ProjectorSettings
from projectors.transcript import TranscriptProjection
from servicekit.logs import configure_logging
from servicekit.settings import KafkaSettings


class _NoRedis:
    def script_load(self, source: str) -> str:
        return "sha"


class _NoDeadLetters:
    def __init__(self, kafka: KafkaSettings, projector: str) -> None:
        self.sent: list[Any] = []

    def send(self, *args: Any) -> None:
        self.sent.append(args)

    def flush(self) -> None:
        pass


class Lines:
    """JSON logging, installed by ``start()`` in the test itself (a handler made during
    fixture setup writes to that phase's capture stream, closed by the time the test runs)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def start(self) -> None:
        configure_logging("project-transcript")

    def __call__(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.capsys.readouterr().err.splitlines()]


@pytest.fixture
def lines(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Lines]:
    for name in ("DSH_LOG_LEVEL", "DSH_LOG_FORMAT"):
        monkeypatch.delenv(name, raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield Lines(capsys)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Runtime[Any]:
    monkeypatch.setattr(poison_module, "DeadLetters", _NoDeadLetters)
    monkeypatch.setattr(rebuilds_module, "read_sessions", lambda *args, **kwargs: {})
    # No Redis here to hold the readers' "being rebuilt" marks.
    monkeypatch.setattr(rebuilds_module.Rebuilds, "marked", lambda *args: nullcontext())
    return Runtime(
        TranscriptProjection(Keys()),
        KafkaSettings(bootstrap_servers="127.0.0.1:9"),
        _NoRedis(),  # type: ignore[arg-type]
        ProjectorSettings(),
    )


def test_a_dead_letter_line_names_the_session_and_partition(
    runtime: Runtime[Any], lines: Lines
) -> None:
    lines.start()
    poison = Poison("s-1", PoisonRecordError("bad bytes"), b"s-1", b"x", 2, 7)
    runtime.poison.deliver([DeadLetter(poison, seq=3)])
    (line,) = lines()
    assert line["level"] == "WARNING" and "DLQ" in line["message"]
    assert (line["session"], line["partition"], line["seq"]) == ("s-1", 2, 3)
    assert line["code"] == "POISON_RECORD" and line["service"] == "project-transcript"


def test_a_session_found_blocked_is_logged_once_with_its_context(
    runtime: Runtime[Any], lines: Lines
) -> None:
    lines.start()
    session = dsh.Session.create("s-2", clock=lambda: 0)
    event = session.append("turn/start", {"turn": 1})
    runtime.cache["s-2"] = Entry(runtime.projection.fresh())
    record = Record("s-2", event, 5, 11)
    runtime.planner.settle([record, record], [[BLOCKED, -1], [BLOCKED, -1]], {})
    (line,) = lines()
    assert "blocked" in line["message"]
    assert (line["session"], line["partition"], line["seq"]) == ("s-2", 5, 0)


def test_a_rebuild_line_names_the_session_partition_and_cause(
    runtime: Runtime[Any], lines: Lines
) -> None:
    lines.start()
    runtime.rebuild({1: {"s-3"}}, cause="gap")
    (line,) = lines()
    assert "rebuilding session s-3" in line["message"]
    assert (line["session"], line["partition"], line["cause"]) == ("s-3", 1, "gap")
