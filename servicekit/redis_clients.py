"""Redis clients built from ``RedisSettings``: the one place a service makes one."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis

from servicekit.settings import RedisSettings

RedisClient = redis.Redis | redis.RedisCluster


def redis_client(settings: RedisSettings, *, max_connections: int | None = None) -> RedisClient:
    """One Redis, or a Redis Cluster (``DSH_REDIS_CLUSTER``): redis-py's ``RedisCluster`` reads
    the slot map from the seed node of the URL and keeps a connection pool per node.
    ``max_connections``: the most a pool opens at once (redis-py's default, 100, refuses more
    with ``MaxConnectionsError``); a thread holds one for each call, a blocking read included."""
    if settings.sentinels:
        return sentinel_primary(settings, max_connections=max_connections)
    url, kwargs = settings.url.get_secret_value(), _pool_kwargs(settings, max_connections)
    if settings.cluster:
        return redis.RedisCluster.from_url(url, **kwargs)
    return redis.Redis.from_url(url, **kwargs)


def _pool_kwargs(settings: RedisSettings, max_connections: int | None) -> dict[str, Any]:
    kwargs = settings.client_kwargs()
    if max_connections is not None:
        kwargs["max_connections"] = max_connections
    return kwargs


def redis_unreachable(client: RedisClient) -> str | None:
    """A readiness check: ``None`` when Redis answers a PING within the client's socket
    timeouts, else why not."""
    try:
        client.ping()
    except Exception as exc:  # refused, timed out, a cluster node down: all "not ready"
        return f"[REDIS_UNREACHABLE] {type(exc).__name__}: {exc}"
    return None


def sentinel_primary(settings: RedisSettings, *, max_connections: int | None = None) -> redis.Redis:
    """The primary the Sentinels name (``DSH_REDIS_SENTINELS``): the client's pool asks them
    again on a connection error, so after a failover its next command reaches the promoted
    replica, and a demoted primary's READONLY reply counts as such an error."""
    from redis.sentinel import Sentinel

    database = int(urlsplit(settings.url.get_secret_value()).path.strip("/") or 0)
    sentinel = Sentinel(settings.sentinel_addresses(), socket_timeout=2.0)
    primary: redis.Redis = sentinel.master_for(
        settings.sentinel_master, db=database, **_pool_kwargs(settings, max_connections)
    )
    return primary
