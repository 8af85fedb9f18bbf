"""Which stack a command talks to: the one recorded in the state dir, unless the environment
names its endpoints explicitly (issue 25)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cli import endpoints
from deploy.local.record import read_record, remove_record, resolved_settings, write_record
from deploy.local.settings import LocalStackSettings


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith(("DSH_LOCAL_", "DSH_KAFKA_BOOTSTRAP_SERVERS", "DSH_REDIS_URL")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("DSH_LOCAL_STATE_DIR", str(tmp_path))
    return tmp_path


def _record(state_dir: Path) -> LocalStackSettings:
    started = LocalStackSettings(
        state_dir=state_dir, kafka_port=31092, controller_port=31192, redis_port=31379,
        metrics_port=31464, partitions=2,
    )  # fmt: skip
    write_record(started)
    return started


def test_a_new_shell_gets_the_recorded_ports_and_explicit_ones_win(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolved_settings().redis_port == LocalStackSettings().redis_port  # nothing recorded
    _record(state_dir)
    settings = resolved_settings()
    assert (settings.kafka_port, settings.redis_port, settings.metrics_port) == (
        31092,
        31379,
        31464,
    )
    monkeypatch.setenv("DSH_LOCAL_REDIS_PORT", "32000")
    assert resolved_settings().redis_port == 32000
    assert resolved_settings().kafka_port == 31092
    remove_record(state_dir)
    assert read_record(state_dir) is None


def test_commands_connect_to_the_recorded_stack_unless_told_otherwise(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(state_dir)
    assert endpoints.kafka_settings().bootstrap_servers == "127.0.0.1:31092"
    assert endpoints.redis_settings().url.get_secret_value() == "redis://127.0.0.1:31379/0"
    assert "`dsh up`" in endpoints.writer_hint()
    assert "note:" not in capsys.readouterr().err

    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
    assert endpoints.kafka_settings().bootstrap_servers == "elsewhere:9092"
    assert endpoints.redis_settings().url.get_secret_value() == "redis://127.0.0.1:31379/0"
    assert "`dsh writer`" in endpoints.writer_hint()


def test_without_a_recorded_stack_the_default_ports_are_not_used_silently(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    defaults = LocalStackSettings()
    assert endpoints.kafka_settings().bootstrap_servers == defaults.bootstrap_servers()
    err = capsys.readouterr().err
    assert "no local stack is recorded" in err and str(state_dir) in err


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("bootstrap_servers"),
        lambda r: r.update(redis_port="6379"),
        lambda r: r.update(kafka_port=None),
    ],
    ids=["a key missing", "a port as text", "a port as null"],
)
def test_a_record_not_written_by_dsh_up_is_ignored_not_trusted(
    state_dir: Path, damage: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(state_dir)
    path = state_dir / "stack.json"
    record = json.loads(path.read_text())
    damage(record)
    path.write_text(json.dumps(record))
    assert read_record(state_dir) is None
    assert resolved_settings().redis_port == LocalStackSettings().redis_port
    assert endpoints.kafka_settings().bootstrap_servers == LocalStackSettings().bootstrap_servers()
    assert "no local stack is recorded" in capsys.readouterr().err
