"""The endpoints of the stack running in a state dir, recorded by `dsh up` in
``<state dir>/stack.json`` and removed by `dsh down`.

Every command finds the stack through it from any shell: `dsh status` and `dsh down` read the
ports the stack was started with, and the read commands connect where it runs. A setting the
environment names explicitly (``DSH_LOCAL_*``) still wins over the record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from deploy.local.settings import LocalStackSettings

RECORD = "stack.json"
# The settings that make a stack's identity: another value is another stack.
IDENTITY = ("brokers", "kafka_port", "controller_port", "redis_port", "metrics_port")


def record_path(state_dir: Path) -> Path:
    return state_dir / RECORD


def write_record(settings: LocalStackSettings) -> None:
    record = {
        **{name: getattr(settings, name) for name in IDENTITY},
        "partitions": settings.partitions,
        "bootstrap_servers": settings.bootstrap_servers(),
        "redis_url": settings.redis_url(),
    }
    path = record_path(settings.state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(record, indent=2) + "\n")
    staging.replace(path)


def read_record(state_dir: Path) -> dict[str, Any] | None:
    """The record, or None when there is none or it is not one `dsh up` wrote (a record
    edited by hand or cut short is ignored rather than trusted)."""
    try:
        record = json.loads(record_path(state_dir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    numbers = (*IDENTITY, "partitions")
    if not all(type(record.get(name)) is int for name in numbers):
        return None
    if not all(isinstance(record.get(name), str) for name in ("bootstrap_servers", "redis_url")):
        return None
    return record


def remove_record(state_dir: Path) -> None:
    record_path(state_dir).unlink(missing_ok=True)


def in_environment(variable: str) -> bool:
    """Whether the environment names ``variable`` (settings read it case-insensitively)."""
    return any(key.upper() == variable.upper() for key in os.environ)


def explicitly_set(name: str) -> bool:
    """Whether the environment names ``DSH_LOCAL_<NAME>``."""
    return in_environment(LocalStackSettings.model_config.get("env_prefix", "") + name)


def resolved_settings() -> LocalStackSettings:
    """The local stack's settings: the environment's, with the recorded stack's ports for
    every identity setting the environment does not name."""
    settings = LocalStackSettings()
    record = read_record(settings.state_dir)
    if record is None:
        return settings
    recorded = {
        name: record[name] for name in (*IDENTITY, "partitions")
        if name in record and not explicitly_set(name)
    }  # fmt: skip
    return settings.model_copy(update=recorded) if recorded else settings


def identity(settings: LocalStackSettings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in IDENTITY}


def describe(record: dict[str, Any]) -> str:
    return (
        f"Kafka {record.get('bootstrap_servers')} (controller port "
        f"{record.get('controller_port')}), Redis {record.get('redis_url')}, /metrics from "
        f"port {record.get('metrics_port')}"
    )
