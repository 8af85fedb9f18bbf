"""Services and tools built from settings: the one place where the `dsh` command turns the
environment (``DSH_*``) into clients, projections and runtimes."""

from __future__ import annotations

import gc
import logging
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from cli.endpoints import kafka_settings, redis_settings
from projectors.catalog import build_projection
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.replay import ReplayResult, replay
from projectors.runtime import Runtime
from projectors.settings import ProjectorSettings
from projectors.topic_reader import read_session
from projectors.verify import Report, verify
from servicekit.health import Health, ServiceSettings, record_clean_exit
from servicekit.interpreters import parse_interpreters
from servicekit.ports import require_free_port, serve_http
from servicekit.progress import Progress
from servicekit.redis_clients import redis_client
from servicekit.settings import KafkaSettings, RedisSettings

log = logging.getLogger("projectors")
METRICS_PORT = {"writer": "DSH_WRITER_METRICS_PORT", "projector": "DSH_PROJECTOR_METRICS_PORT"}


def build_runtime(
    name: str,
    kafka: KafkaSettings,
    redis_settings: RedisSettings,
    settings: ProjectorSettings,
    health: Health | None = None,
) -> Runtime[Any]:
    client = redis_client(redis_settings)
    return Runtime(build_projection(name, settings), kafka, client, settings, health)


def serve_projector(name: str, kafka: KafkaSettings, redis_settings: RedisSettings) -> None:
    """``dsh project NAME``: run until SIGTERM or SIGINT, finishing the batch in hand."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings, service = ProjectorSettings(), ServiceSettings()
    require_free_port(settings.metrics_port, "/metrics", METRICS_PORT["projector"])
    log.info("projector %s starting: Redis, then group %s", name, settings.group_id(name))
    health = Health(service.stall_s)
    runtime = build_runtime(name, kafka, redis_settings, settings, health)
    serve_http(settings.metrics_port, METRICS_PORT["projector"], health)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runtime.run(stop)
    record_clean_exit(service)


def serve_writer(kafka: KafkaSettings, log_level: str = "INFO") -> int:
    """``dsh writer``: settings from the environment, /metrics, signals, the loop."""
    from producers.writer import Writer
    from producers.writer.failpoints import Failpoints
    from producers.writer.settings import WriterSettings

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Sessions are long-lived, acyclic trees of small containers: with the default thresholds
    # the cycle collector rescans them over and over and finds nothing (docs/benchmarks.md).
    gc.set_threshold(100_000, 50, 100)
    settings, service = WriterSettings(), ServiceSettings()
    require_free_port(settings.metrics_port, "/metrics", METRICS_PORT["writer"])
    health = Health(service.stall_s)
    writer = Writer(kafka, settings, failpoints=Failpoints(settings.failpoint), health=health)
    serve_http(settings.metrics_port, METRICS_PORT["writer"], health)

    def stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("dsh.writer").info("signal %d: stopping", signum)
        writer.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    writer.run()
    record_clean_exit(service)
    return 0


def reader_from_env() -> Reader:
    settings = ProjectorSettings()
    return Reader(redis_client(redis_settings()), Keys(settings.key_prefix))


def verify_from_env(session_id: str, progress: Progress | None = None) -> Report:
    """``dsh verify``: the session's log from the events topic against the three read models.
    ``progress(records, total)``: the scan of the session's partition."""
    settings = ProjectorSettings()
    items = read_session(kafka_settings(), session_id, progress=progress)
    return verify(session_id, items, reader_from_env(), parse_interpreters(settings.projections))


def replay_from_env(
    projections: Sequence[str], session_ids: Sequence[str], progress: Progress | None
) -> ReplayResult:
    settings = ProjectorSettings()
    kafka, redis = kafka_settings(), redis_settings()
    runtimes = [build_runtime(name, kafka, redis, settings) for name in projections]
    return replay(kafka, runtimes, session_ids, progress)
