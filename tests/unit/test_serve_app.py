"""What `dsh serve`'s lifespan makes, without a pipeline: its clients connect lazily."""

from __future__ import annotations

from fastapi.testclient import TestClient
from pydantic import SecretStr

from serve.app import create_app, redis_connections
from serve.settings import ServeSettings
from servicekit.settings import RedisSettings


def test_every_worker_thread_and_feed_can_hold_a_redis_connection_at_once() -> None:
    """A session feed holds a Redis connection in its blocking read: with more streamed
    sessions than redis-py's default pool (100), the pool must still give each feed and each
    worker thread one, or the 101st stream and every read beside the open ones fail with
    MaxConnectionsError."""
    settings = ServeSettings(max_streams=1000)
    redis = RedisSettings(url=SecretStr("redis://127.0.0.1:1/0"))  # never connected here
    with TestClient(create_app(settings, redis=redis)) as client:
        pool = client.app.state.clients.redis.connection_pool  # type: ignore[attr-defined]
        assert pool.max_connections == redis_connections(settings) == 1040
