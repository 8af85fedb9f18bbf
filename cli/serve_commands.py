"""`dsh serve`: the HTTP API (``serve``), run by uvicorn until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
from types import FrameType
from typing import TYPE_CHECKING, Any

from servicekit.settings import KafkaSettings, RedisSettings

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from fastapi import FastAPI

METRICS_PORT = "DSH_SERVE_METRICS_PORT"


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the HTTP API: append, read and follow sessions from any language",
        description="Settings: DSH_SERVE_* (address, limits, tokens and tenants), DSH_KAFKA_* "
        "and DSH_REDIS_* (the pipeline), DSH_PROJECTOR_KEY_PREFIX (the read models' keys) and "
        "DSH_LOG_*. The API and its errors: docs/http-api.md; its OpenAPI document: "
        "docs/openapi.json (and /docs while it runs).",
    )
    serve.add_argument("--host", default=None, help="address to listen on (DSH_SERVE_HOST)")
    serve.add_argument("--port", type=int, default=None, help="port (DSH_SERVE_PORT)")
    serve.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING or ERROR (default DSH_LOG_LEVEL)"
    )
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401  (the app's framework: checked here, named in the error)
        import uvicorn
    except ImportError as exc:
        from serve.errors import ServeDependencyError

        raise ServeDependencyError(
            f"dsh serve needs the serve extra ({exc.name} is missing): "
            "pip install 'dsh-pipeline[serve]'"
        ) from None

    from cli.endpoints import KAFKA_VARIABLE, REDIS_VARIABLE, kafka_settings, redis_settings
    from serve.metrics import multiprocess_directory, workers_registry
    from serve.settings import ServeSettings
    from servicekit.logs import configure_logging
    from servicekit.ports import require_free_port, serve_http

    logs = configure_logging("serve", args.log_level)
    settings = ServeSettings()
    # Made here, whatever the workers (it connects to nothing): a setting it refuses, such as a
    # bad token table, stops this process with the error. A worker that fails as it starts is
    # restarted by uvicorn's supervisor forever.
    app = make_app(kafka_settings(), redis_settings())
    server: dict[str, Any] = {
        "host": args.host or settings.host,
        "port": settings.port if args.port is None else args.port,
        "log_level": logs.level.lower(),
        "log_config": None,  # our handler (configure_logging), not uvicorn's own
        "server_header": False,
        "access_log": settings.access_log,
        # Bounded: on SIGTERM the open streams end at once (serve.draining), and whatever
        # else is in hand is cut after this, so the lifespan's cleanup runs and the process
        # exits before a supervisor's grace period ends.
        "timeout_graceful_shutdown": settings.shutdown_timeout_s,
    }
    # uvicorn raises the signal it stopped for again once it has stopped; by then the stop is
    # done, and a service stopped on purpose exits 0, not killed by the signal. The same for
    # a SIGTERM before uvicorn handles it (while it starts): not ignored, an exit.
    signal.signal(signal.SIGTERM, _stopped)
    require_free_port(settings.metrics_port, "/metrics", METRICS_PORT)
    if settings.workers == 1:
        metrics = serve_http(settings.metrics_port, METRICS_PORT, None)
        try:
            uvicorn.run(app, **server)
        finally:
            _shut(metrics)
        return 0
    # Each worker is a process of its own that imports the app: it finds the pipeline this
    # one resolved (perhaps the local stack's record), the log level and the directory of its
    # metrics in its environment; this process serves the sum of theirs.
    os.environ[KAFKA_VARIABLE] = kafka_settings().bootstrap_servers
    os.environ[REDIS_VARIABLE] = redis_settings().url.get_secret_value()
    os.environ["DSH_LOG_LEVEL"] = logs.level
    with multiprocess_directory() as directory:
        registry = workers_registry(directory)
        metrics = serve_http(settings.metrics_port, METRICS_PORT, None, registry)
        try:
            uvicorn.run(
                f"{__name__}:app_in_worker", factory=True, workers=settings.workers, **server
            )
        finally:
            _shut(metrics)
    return 0


def _shut(server: WSGIServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


def _stopped(sig: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def make_app(kafka: KafkaSettings, redis: RedisSettings) -> FastAPI:
    from projectors.keys import Keys
    from projectors.settings import ProjectorSettings
    from serve.app import create_app

    return create_app(None, kafka, redis, Keys(ProjectorSettings().key_prefix))


def app_in_worker() -> FastAPI:
    """The app of one of `DSH_SERVE_WORKERS` processes (uvicorn's factory)."""
    from servicekit.logs import configure_logging

    configure_logging("serve")
    return make_app(KafkaSettings(), RedisSettings())
