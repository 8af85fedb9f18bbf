"""Faults a writer can be built with, for the crash and takeover tests (``DSH_WRITER_FAILPOINT``).

They make zombies and dead owners with open transactions on purpose, at points no signal
sent from outside can hit reliably:

- ``stop-before-produce:<request id>``: the process stops itself (SIGSTOP) before it produces
  anything of the batch that holds that request;
- ``stop-before-commit:<request id>``: it stops once that batch's offsets went to its
  transaction, so they stay pending;
- ``hang-in-send-offsets-after:<seconds>``: the first offsets sent that many seconds after
  start never return, as librdkafka's sometimes do not (``servicekit/watchdog.py``).

The writer calls the hooks at those points; :data:`NONE` does nothing at any of them.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from servicekit.settings import ConfigError

log = logging.getLogger("dsh.writer")

_KINDS = ("stop-before-produce", "stop-before-commit", "hang-in-send-offsets-after")


def _stop_process(before: str) -> None:
    log.warning("failpoint: stopping before %s", before)
    os.kill(os.getpid(), signal.SIGSTOP)
    log.warning("failpoint: resumed")


def _hang() -> None:
    log.warning("failpoint: hanging in send_offsets_to_transaction")
    threading.Event().wait()  # never set: what librdkafka #5456 does


class Failpoints:
    def __init__(
        self,
        spec: str = "",
        *,
        stop: Callable[[str], None] = _stop_process,
        hang: Callable[[], None] = _hang,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        kind, _, arg = spec.partition(":")
        if spec and (kind not in _KINDS or not arg):
            raise ConfigError(
                f"failpoint {spec!r}: expected one of {', '.join(k + ':…' for k in _KINDS)}",
                code="BAD_FAILPOINT",
            )
        self._kind, self._arg = kind, arg
        self._stop, self._hang, self._clock = stop, hang, clock
        self._hang_at = clock() + float(arg) if kind == "hang-in-send-offsets-after" else None
        self._stop_before_commit = False

    def command(self, request_id: str) -> None:
        """A command of the batch is about to be produced."""
        if self._arg != request_id:
            return
        if self._kind == "stop-before-produce":
            self._kind = ""
            self._stop(f"producing request {request_id}")
        elif self._kind == "stop-before-commit":
            self._kind = ""
            self._stop_before_commit = True

    def offsets_sent(self) -> None:
        """The batch's offsets went to its transaction; the commit comes next."""
        if self._stop_before_commit:
            self._stop_before_commit = False
            self._stop("committing")

    def sending_offsets(self) -> None:
        """The batch's offsets are about to go to its transaction."""
        if self._hang_at is not None and self._clock() >= self._hang_at:
            self._hang_at = None
            self._hang()


NONE = Failpoints()
