"""The ASGI app: routes, problem details, the body limit, and the clients its lifespan makes.

``create_app`` connects to nothing: the Redis and Kafka clients are made when the server
starts it (the lifespan) or, for Kafka, at a tenant's first append, so the OpenAPI document is
built without a pipeline and the service starts (and says it is not ready) without one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from projectors.keys import Keys
from serve import appends, health, inspection, problems, reads, stream
from serve.auth import Auth
from serve.clients import Clients
from serve.limits import BodyLimit
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


def worker_threads(settings: ServeSettings) -> int:
    """The thread pool's size: anyio's default 40 for reads and appends, and one for each
    stream that may be open."""
    return 40 + settings.max_streams


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
        # Each open stream holds a worker thread while it waits; the reads and appends keep
        # anyio's default 40 beside them. Each thread holds a Redis connection while it calls
        # (an open stream's blocking read too): one each, or redis-py's default pool of 100
        # refuses the rest.
        threads = worker_threads(settings)
        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        app.state.clients = Clients(
            settings,
            kafka or KafkaSettings(),
            redis_client(redis or RedisSettings(), max_connections=threads),
            keys or Keys(),
            auth,
        )
        try:
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
    return app
