"""The ASGI app: routes, problem details, the body limit, and the clients its lifespan makes.

``create_app`` connects to nothing: the Redis and Kafka clients are made when the server
starts it (the lifespan) or, for Kafka, at a tenant's first append, so the OpenAPI document is
built without a pipeline and the service starts (and says it is not ready) without one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from projectors.keys import Keys
from serve import appends, health, inspection, problems, reads, stream
from serve.auth import Auth
from serve.clients import Clients
from serve.draining import draining_on_signals
from serve.limits import BodyLimit
from serve.metrics import Measured
from serve.settings import ServeSettings
from servicekit.redis_clients import redis_client
from servicekit.settings import KafkaSettings, RedisSettings

API_VERSION = "1.0.0"
DESCRIPTION = """\
Append to dsh-pipeline sessions and read them back, from any language.

Appends go through the single writer, exactly once: an `Idempotency-Key` makes a retry return
the original events. Reads come from the projectors' read models; `at_least` (a seq an append
returned) makes them read-your-writes. Errors are RFC 9457 problem details
(`application/problem+json`) with a stable `code`: see docs/http-api.md.
"""


def redis_connections(settings: ServeSettings) -> int:
    """The Redis pool's size: one for each of anyio's 40 worker threads (reads, appends, a
    stream's history) and one for each session feed, which holds one in its blocking read (one
    feed per streamed session, so at most one per stream)."""
    return WORKER_THREADS + settings.max_streams


WORKER_THREADS = 40  # anyio's default


def create_app(
    settings: ServeSettings | None = None,
    kafka: KafkaSettings | None = None,
    redis: RedisSettings | None = None,
    keys: Keys | None = None,
) -> FastAPI:
    settings = settings or ServeSettings()
    auth = Auth.from_settings(settings)  # a bad token table stops the service at start

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A connection each for the threads and the feeds that may call at once, or redis-py's
        # default pool of 100 refuses the rest.
        app.state.clients = Clients(
            settings,
            kafka or KafkaSettings(),
            redis_client(redis or RedisSettings(), max_connections=redis_connections(settings)),
            keys or Keys(),
            auth,
        )
        try:
            with draining_on_signals(app.state.clients.stopping):
                yield
        finally:
            app.state.clients.close()

    app = FastAPI(
        title="dsh-pipeline HTTP API",
        version=API_VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    for module in (appends, reads, stream, health, inspection):
        app.include_router(module.router)
    inspection.mount_page(app)
    problems.install(app, settings.retry_after_s)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(Measured)  # outermost: a refused body is a request answered too
    return app
