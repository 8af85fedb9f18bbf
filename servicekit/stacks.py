"""Every thread's Python stack on demand, for a service that is alive but not progressing.

``kill -USR1 PID`` writes the stacks to the process's stderr (its log) and the service goes
on: the one look inside a stalled writer or projector that needs no restart and no debugger.
"""

from __future__ import annotations

import faulthandler
import signal
import sys

DUMP_SIGNAL = signal.SIGUSR1


def dump_stacks_on_signal() -> bool:
    """Install the handler (C-level: it runs even while the main thread waits in a call into
    librdkafka, where a Python signal handler would wait for that call to return). Returns
    whether it could: the dump goes to stderr's file descriptor, which a stream that only
    stands in for stderr (pytest's capture, a host that calls the CLI in process) has not."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last
        return False
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    return True
