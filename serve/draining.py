"""The server is stopping: open transcript streams end at their next idle second.

On SIGTERM or SIGINT uvicorn stops taking connections and waits for the responses in hand to
finish; a stream never finishes by itself, so it kept the process (and a pod's grace period)
waiting, and the lifespan's cleanup never ran. uvicorn tells an app nothing of the signal until
its connections are done, so the app chains uvicorn's handler for the lifespan's duration: the
handler sets ``stopping``, each stream ends cleanly when it sees it (its client resumes with
``Last-Event-ID`` elsewhere), and uvicorn's own handling goes on as before.
``DSH_SERVE_SHUTDOWN_TIMEOUT_S`` bounds the rest (an append waiting for its reply).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def draining_on_signals(stopping: threading.Event) -> Iterator[None]:
    """``stopping`` is set by SIGTERM or SIGINT while the block runs (in the main thread only,
    where signals are handled: a server in a test's thread is stopped by its test)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def on_signal(sig: int, frame: FrameType | None) -> None:
        stopping.set()
        handler = previous[signal.Signals(sig)]
        if callable(handler):
            handler(sig, frame)
        elif handler == signal.SIG_DFL:  # no server handles it: stop as the default does
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is on_signal:  # not whatever replaced it since
                signal.signal(sig, handler)
