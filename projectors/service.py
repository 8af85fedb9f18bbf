"""Wiring: a projector process built from settings (the one place clients are created)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from typing import Any

import redis

from deploy.config import KafkaSettings, RedisSettings
from deploy.interpreters import parse_interpreters as parse
from projectors import metrics
from projectors.audit import AuditProjection
from projectors.batch_io import RedisClient
from projectors.errors import ProjectorError
from projectors.keys import Keys
from projectors.projection import Projection
from projectors.read_api import Reader
from projectors.replay import ReplayResult, progress_bar, replay
from projectors.runtime import Runtime
from projectors.settings import ProjectorSettings
from projectors.surface import SurfaceProjection
from projectors.topic_reader import read_session
from projectors.transcript import TranscriptProjection
from projectors.verify import Report, verify

PROJECTIONS = ("surface", "transcript", "audit")

log = logging.getLogger("projectors")


def redis_client(settings: RedisSettings) -> RedisClient:
    """One Redis, or a Redis Cluster (``DSH_REDIS_CLUSTER``): redis-py's ``RedisCluster`` reads
    the slot map from the seed node of the URL and keeps a connection pool per node."""
    url, kwargs = settings.url.get_secret_value(), settings.client_kwargs()
    if settings.cluster:
        return redis.RedisCluster.from_url(url, **kwargs)
    return redis.Redis.from_url(url, **kwargs)


def build_projection(name: str, settings: ProjectorSettings) -> Projection[Any]:
    keys = Keys(settings.key_prefix)
    if name == "surface":
        return SurfaceProjection(keys, parse(settings.projections))
    if name == "transcript":
        return TranscriptProjection(keys)
    if name == "audit":
        return AuditProjection(keys)
    raise ProjectorError(
        f"unknown projection {name!r}; known: {', '.join(PROJECTIONS)}", code="UNKNOWN_PROJECTION"
    )


def build_runtime(
    name: str, kafka: KafkaSettings, redis_settings: RedisSettings, settings: ProjectorSettings
) -> Runtime[Any]:
    return Runtime(build_projection(name, settings), kafka, redis_client(redis_settings), settings)


def run(name: str) -> None:
    """``dsh project NAME``: run until SIGTERM or SIGINT, finishing the batch in hand."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = ProjectorSettings()
    log.info("projector %s starting: Redis, then group %s", name, settings.group_id(name))
    runtime = build_runtime(name, KafkaSettings(), RedisSettings(), settings)
    metrics.serve(settings.metrics_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runtime.run(stop)


def reader_from_env() -> Reader:
    settings = ProjectorSettings()
    return Reader(redis_client(RedisSettings()), Keys(settings.key_prefix))


def verify_from_env(session_id: str) -> Report:
    """``dsh verify``: the session's log from the events topic against the three read models."""
    settings = ProjectorSettings()
    items = read_session(KafkaSettings(), session_id)
    return verify(session_id, items, reader_from_env(), parse(settings.projections))


def replay_from_env(
    projections: Sequence[str], session_ids: Sequence[str], show_progress: bool
) -> ReplayResult:
    settings = ProjectorSettings()
    kafka, redis_settings = KafkaSettings(), RedisSettings()
    runtimes = [build_runtime(name, kafka, redis_settings, settings) for name in projections]
    return replay(kafka, runtimes, session_ids, progress_bar() if show_progress else None)
