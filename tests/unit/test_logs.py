"""The services' one logging setup: structured lines with context, levels from settings,
secrets masked."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from servicekit.logs import configure_logging, log_context
from servicekit.settings import ConfigError


@pytest.fixture(autouse=True)
def _restore_root_logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("DSH_LOG_LEVEL", "DSH_LOG_FORMAT"):
        monkeypatch.delenv(name, raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_level_logger_message_and_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("writer")
    log = logging.getLogger("dsh.writer")
    with log_context(session="s-1"):
        log.info("partition %d restored", 3, extra={"partition": 3})
    log.debug("not at INFO")
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["level"] == "INFO" and record["logger"] == "dsh.writer"
    assert record["message"] == "partition 3 restored"
    assert record["service"] == "writer"
    assert record["session"] == "s-1" and record["partition"] == 3
    assert record["time"].endswith("+00:00")


def test_level_and_format_come_from_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_LOG_FORMAT", "logfmt")
    monkeypatch.setenv("DSH_LOG_LEVEL", "WARNING")
    configure_logging("project-surface")
    log = logging.getLogger("projectors")
    log.info("hidden")
    log.warning("Redis lost its data", extra={"partition": 1})
    (line,) = capsys.readouterr().err.splitlines()
    assert 'level=WARNING logger=projectors service=project-surface message="Redis lost' in line
    assert line.endswith("partition=1")
    # A flag overrides the setting; an unknown level or format is a ConfigError.
    configure_logging("writer", "debug")
    assert logging.getLogger().level == logging.DEBUG
    with pytest.raises(ConfigError):
        configure_logging("writer", "chatty")
    monkeypatch.setenv("DSH_LOG_FORMAT", "xml")
    with pytest.raises(ConfigError):
        configure_logging("writer")


def test_secrets_never_reach_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("writer")
    secret = SecretStr("hunter2")
    logging.getLogger("dsh").warning(
        "connecting with %s", secret, extra={"sasl_password": "hunter2", "redis_token": "t0k"}
    )
    err = capsys.readouterr().err
    assert "hunter2" not in err and "t0k" not in err
    assert json.loads(err)["sasl_password"] == "**********"
