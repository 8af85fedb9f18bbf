"""What a service says about itself: ``/livez`` (its loop makes progress) and ``/readyz`` (it
can do its work: each named check passes), for Kubernetes' probes, compose's healthchecks and
`dsh status`; and how it ended.

Every service answers both in one shape (``dsh serve`` too): ``200`` with
``{"status": "ready", "checks": {name: "ok"}}``, or ``503`` problem details with the code
``NOT_READY`` (``NOT_LIVE``), a ``detail`` naming each failing check and why, and the same
``checks``. A check is a callable returning ``None`` when it passes, or why it does not. A
clean stop (SIGTERM, SIGINT) is written to ``DSH_SERVICE_EXIT_FILE`` when that is set: a
process gone without that line died.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings

Check = Callable[[], str | None]
MEDIA_TYPE = "application/problem+json"
# The problem type every service names for NOT_READY; serve's other problems share its base.
PROBLEM_BASE = "https://dsh-pipeline.dev/problems/"


class ServiceSettings(StrictSettings):
    """What the writer and the projectors share: their liveness bound, and what they record
    for the local stack's `dsh status` (``DSH_SERVICE_*``)."""

    model_config = SettingsConfigDict(env_prefix="DSH_SERVICE_", extra="forbid", frozen=True)

    exit_file: Path | None = None
    """File where the service records a clean stop (SIGTERM, SIGINT), so `dsh status` tells a
    stopped service from one that died; `dsh up` sets it for the services it starts."""
    stall_s: Annotated[float, Field(gt=0)] = 120.0
    """`/livez` fails once the service's main loop has made no progress for this long (a
    writer restoring partitions counts as progress), and its supervisor restarts it."""


class Health:
    """The liveness and readiness of one service process.

    The service's loop calls :meth:`beat` once a round (a time stamp, about 50 ns); a long step
    that is making progress on its own bound (a writer's restore) runs inside :meth:`busy`.
    Readiness checks are registered by name and run when asked, on the HTTP server's thread."""

    def __init__(self, stall_s: float = 120.0) -> None:
        self.stall_s = stall_s
        self._checks: dict[str, Check] = {}
        self._last_beat = time.monotonic()
        self._busy = 0
        self._lock = threading.Lock()

    def check(self, name: str, check: Check) -> None:
        self._checks[name] = check

    def beat(self) -> None:
        self._last_beat = time.monotonic()

    @contextmanager
    def busy(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
            self.beat()

    def liveness(self) -> tuple[int, dict[str, Any]]:
        idle = time.monotonic() - self._last_beat
        if self._busy or idle <= self.stall_s:
            return 200, {"status": "alive", "checks": {"loop": "ok"}}
        why = f"the service's loop has not come round for {idle:.0f}s (bound: {self.stall_s:g}s)"
        return problem("NOT_LIVE", {"loop": why})

    def readiness(self) -> tuple[int, dict[str, Any]]:
        return verdict({name: run(check) for name, check in self._checks.items()})


def run(check: Check) -> str:
    """``"ok"``, or why not: a check that raises fails with what it raised."""
    try:
        why = check()
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    return "ok" if why is None else why


def verdict(checks: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    """The status and body of ``/readyz`` for these check results (``"ok"`` or why not)."""
    if all(why == "ok" for why in checks.values()):
        return 200, {"status": "ready", "checks": dict(checks)}
    return problem("NOT_READY", checks)


def problem(code: str, checks: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    detail = "; ".join(f"{name}: {why}" for name, why in checks.items() if why != "ok")
    return 503, {
        "type": PROBLEM_BASE + code.lower().replace("_", "-"),
        "title": "Service unavailable",
        "status": 503,
        "detail": detail,
        "code": code,
        "checks": dict(checks),
    }


def failing(body: Mapping[str, Any]) -> dict[str, str]:
    """The checks a ``/readyz`` or ``/livez`` body names as failing, with why."""
    checks = body.get("checks")
    if not isinstance(checks, dict):  # `dsh serve`'s /livez says only {"status": "alive"}
        ok = body.get("status") in ("alive", "ready")
        return {} if ok else {"response": f"no checks in {str(body)[:200]}"}
    return {str(name): str(why) for name, why in checks.items() if why != "ok"}


def record_clean_exit(settings: ServiceSettings) -> None:
    if settings.exit_file is not None:
        settings.exit_file.write_text(json.dumps({"exit": "clean", "at": time.time()}) + "\n")


def exited_cleanly(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text()).get("exit") == "clean")
    except (OSError, ValueError, AttributeError):
        return False
