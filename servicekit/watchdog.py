"""End a service whose call into librdkafka has outlived its bound by far.

librdkafka's transactional calls take a timeout, and a few do not always keep it:
``send_offsets_to_transaction`` can wait forever on a group coordinator it has cached but
cannot reach (librdkafka issues #5456 and #5511, open in the version we ship; seen here in a
broker-kill run and with every broker gone). A writer blocked there keeps its partitions,
serves none of them and never sees an error to recover from: the group still hears its
heartbeats, so nobody takes over either. A synchronous offset commit has no timeout at all.

Such a process cannot be mended from inside (the blocked call holds its client), so the
watchdog ends it: it logs which call and for how long, writes every thread's stack and exits
with :data:`STUCK_EXIT_CODE`. The supervisor (Kubernetes, compose, systemd) starts a fresh
process, which takes the partitions over and fences what the stuck one left open. Nothing
acknowledged is lost: a transaction that never committed was never acknowledged, and a
projector's offsets only say where to resume (its apply is idempotent).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType

log = logging.getLogger("dsh.watchdog")

STUCK_EXIT_CODE = 70  # EX_SOFTWARE: the process is sound, a library call never returned


def exit_stuck(call: str, running_s: float, bound_s: float) -> None:
    """The default verdict: say what hung and where, then end the process at once (a normal
    exit would wait for the very call that hangs, or for its client's threads)."""
    log.critical(
        "%s has not returned %.0fs after it was called (bound: %.0fs): exiting (code %d) so "
        "that a fresh process takes over; the stacks of every thread follow",
        call,
        running_s,
        bound_s,
        STUCK_EXIT_CODE,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(STUCK_EXIT_CODE)


class CallWatchdog:
    """Deadlines for blocking calls, checked by one daemon thread.

    ``with watchdog.watch("commit_transaction", 30.0): producer.commit_transaction(30.0)``
    costs about 1.5 µs (two dict operations); the bound is the call's own timeout, or what it
    should take when it has none. Only a call still running ``grace_s`` past its bound is acted
    on (``on_stuck(call, running_s, bound_s)``). ``grace_s`` 0: off."""

    def __init__(
        self,
        grace_s: float,
        on_stuck: Callable[[str, float, float], None] = exit_stuck,
        check_every_s: float = 1.0,
    ) -> None:
        self.grace_s = grace_s
        self._on_stuck = on_stuck
        self._check_every_s = check_every_s
        # (call, started, bound) of every call in progress, on any thread, by its watch's id.
        self._running: dict[int, tuple[str, float, float]] = {}
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if grace_s > 0:
            self._thread = threading.Thread(target=self._check, name="dsh-watchdog", daemon=True)
            self._thread.start()

    def watch(self, call: str, bound_s: float) -> _Watched:
        return _Watched(self._running if self._thread is not None else None, call, bound_s)

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            # The thread wakes at once; the bound only matters if a custom verdict is still
            # running. Not a multiple of check_every_s: a busy machine can take longer than a
            # short interval to schedule it, and close() should mean the thread is gone.
            self._thread.join(max(self._check_every_s * 2, 1.0))

    def _check(self) -> None:
        while not self._closed.wait(self._check_every_s):
            now = time.monotonic()
            # A copy: calls start and end on other threads meanwhile.
            for call, started, bound_s in list(self._running.values()):
                if now - started > bound_s + self.grace_s:
                    self._on_stuck(call, now - started, bound_s)
                    return  # one verdict: the default never returns


class _Watched:
    """One call's entry in the running table while its block runs. A class, not a generator
    context manager: it wraps every transactional call of the writer, and costs a fraction."""

    __slots__ = ("_bound_s", "_call", "_running")

    def __init__(
        self, running: dict[int, tuple[str, float, float]] | None, call: str, bound_s: float
    ) -> None:
        self._running = running
        self._call = call
        self._bound_s = bound_s

    def __enter__(self) -> None:
        if self._running is not None:
            self._running[id(self)] = (self._call, time.monotonic(), self._bound_s)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._running is not None:
            del self._running[id(self)]
