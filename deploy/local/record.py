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
    try:
        record = json.loads(record_path(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def remove_record(state_dir: Path) -> None:
    record_path(state_dir).unlink(missing_ok=True)


def explicitly_set(name: str) -> bool:
    """Whether the environment names ``DSH_LOCAL_<NAME>`` (settings read it case-insensitively)."""
    wanted = LocalStackSettings.model_config.get("env_prefix", "") + name
    return any(key.upper() == wanted.upper() for key in os.environ)


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
