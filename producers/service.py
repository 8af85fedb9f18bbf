"""The writer as a process: settings from the environment, /metrics, signals, the loop."""

from __future__ import annotations

import gc
import logging
import signal
from types import FrameType

from deploy.config import KafkaSettings
from producers.settings import WriterSettings
from producers.writer import Writer


def serve_writer(log_level: str = "INFO") -> int:
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Sessions are long-lived, acyclic trees of small containers: with the default thresholds
    # the cycle collector rescans them over and over and finds nothing (see BENCHMARKS.md).
    gc.set_threshold(100_000, 50, 100)
    settings = WriterSettings()
    writer = Writer(KafkaSettings(), settings)
    if settings.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port)

    def stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("dsh.writer").info("signal %d: stopping", signum)
        writer.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    writer.run()
    return 0
