"""A projector benchmark run's keys in Redis: the projector settings that put them under the
run's own prefix, watching for an event to become visible on a session's surface, and
deleting the keys at the end."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from projectors.keys import Keys
from projectors.settings import ProjectorSettings

# One command and one reply per look at all sessions, not one per session: the watcher
# shares the 2 cores with what it measures.
APPLIED_OF = (
    "local r = {} for i, k in ipairs(KEYS) do "
    "r[i] = redis.call('HGET', k, 'applied') or false end return r"
)


def settings_for(run: str, **extra: Any) -> ProjectorSettings:
    """A projector's settings with its group and keys under ``bench-RUN``."""
    return ProjectorSettings(
        group_prefix=f"bench-{run}", key_prefix=f"bench-{run}", poll_timeout_s=0.05, **extra
    )


def applied_key(prefix: str, sid: str) -> str:
    """The surface's hash holding the last seq applied to session ``sid``."""
    return Keys(prefix).meta("surface", sid)


def delete_prefix(client: redis.Redis | redis.RedisCluster, prefix: str) -> None:
    # One Redis (the bench does not run on a cluster: UNLINK of many slots would be refused).
    batch = []
    for key in client.scan_iter(match=f"{prefix}:*", count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            client.unlink(*batch)
            batch = []
    if batch:
        client.unlink(*batch)


def wait_until_applied(client: redis.Redis, key: str, timeout: float = 60.0) -> None:
    """Until the surface behind ``key`` has an event applied (or ``timeout`` s passed)."""
    deadline = time.monotonic() + timeout
    while client.hget(key, "applied") is None and time.monotonic() < deadline:
        time.sleep(0.05)


class AppliedWatcher:
    """While the ``with`` block runs, looks every ``interval`` s at the seq applied to each
    session's surface and keeps when (``time.perf_counter()``) each seq of ``sessions[i]``
    was first seen: ``visible[(i, seq)]``. The block's end waits a second for the last ones."""

    def __init__(
        self, client: redis.Redis, prefix: str, sessions: list[str], interval: float
    ) -> None:
        self.visible: dict[tuple[int, int], float] = {}
        self._keys = [applied_key(prefix, sid) for sid in sessions]
        self._applied_of = client.register_script(APPLIED_OF)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="applied", daemon=True)

    def _run(self) -> None:
        seen = [-1] * len(self._keys)
        while not self._stop.is_set():
            values = self._applied_of(keys=self._keys)
            now = time.perf_counter()
            for i, value in enumerate(values):
                applied = -1 if value is None else int(value)
                for seq in range(seen[i] + 1, applied + 1):
                    self.visible[(i, seq)] = now
                seen[i] = max(seen[i], applied)
            time.sleep(self._interval)

    def __enter__(self) -> AppliedWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(1.0)
        self._stop.set()
        self._thread.join(5)
