"""What a service says about itself to `dsh status` (and, later, to readiness probes): whether
each dependency it needs answers, and how it ended.

Readiness is the ``dsh_ready{check}`` gauge on the service's ``/metrics``: ``1`` while the
dependency named by ``check`` (``redis`` for a projector) answers, ``0`` when it does not. A
clean stop (SIGTERM, SIGINT) is written to ``DSH_SERVICE_EXIT_FILE`` when that is set: a
process gone without that line died.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from prometheus_client import Gauge
from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings

READY = Gauge(
    "dsh_ready",
    "1 while the dependency named by check answers the service, 0 while it does not",
    ["check"],
)


class ServiceSettings(StrictSettings):
    """What a service records for the local stack's `dsh status` (``DSH_SERVICE_*``)."""

    model_config = SettingsConfigDict(env_prefix="DSH_SERVICE_", extra="forbid", frozen=True)

    exit_file: Path | None = None
    """File where the service records a clean stop (SIGTERM, SIGINT), so `dsh status` tells a
    stopped service from one that died; `dsh up` sets it for the services it starts."""


def report(check: str, ok: bool) -> None:
    READY.labels(check).set(1 if ok else 0)


def record_clean_exit(settings: ServiceSettings) -> None:
    if settings.exit_file is not None:
        settings.exit_file.write_text(json.dumps({"exit": "clean", "at": time.time()}) + "\n")


def exited_cleanly(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text()).get("exit") == "clean")
    except (OSError, ValueError, AttributeError):
        return False


def not_ready(metrics_text: str) -> list[str]:
    """The checks a ``/metrics`` page reports as failing (``dsh_ready{check="redis"} 0.0``)."""
    failing = []
    for line in metrics_text.splitlines():
        if line.startswith("dsh_ready{"):
            labels, value = line.rsplit(" ", 1)
            if float(value) < 1:
                failing.append(labels.split('check="', 1)[1].split('"', 1)[0])
    return failing
