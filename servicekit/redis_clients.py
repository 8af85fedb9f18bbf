"""Redis clients built from ``RedisSettings``: the one place a service makes one."""

from __future__ import annotations

from typing import Any

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
    replica, and a demoted primary's READONLY reply counts as such an error.

    ``url`` gives the primary what it gives one server, read by redis-py's own parser and
    taking precedence the same way: the database, user and password, its parameters
    (``?ssl_cert_reqs=…``, ``?socket_timeout=…``, …) and TLS (``rediss://``, verified with
    ``ssl_ca_certs``), which the Sentinels are then reached over too; ``sentinel_password`` is
    theirs. Only its host and port are the Sentinels' to say."""
    from redis.connection import SSLConnection, parse_url
    from redis.sentinel import Sentinel

    options: dict[str, Any] = parse_url(settings.url.get_secret_value())  # type: ignore[no-untyped-call]
    for address in ("host", "port"):
        options.pop(address, None)
    tls = issubclass(options.pop("connection_class", redis.Connection), SSLConnection)
    primary_kwargs = {**_pool_kwargs(settings, max_connections), **options}
    sentinel_kwargs: dict[str, Any] = {"socket_timeout": 2.0}
    if tls:
        primary_kwargs["ssl"] = sentinel_kwargs["ssl"] = True
        if settings.ssl_ca_certs is not None:
            sentinel_kwargs["ssl_ca_certs"] = settings.ssl_ca_certs
    if settings.sentinel_password is not None:
        sentinel_kwargs["password"] = settings.sentinel_password.get_secret_value()
    sentinel = Sentinel(settings.sentinel_addresses(), sentinel_kwargs=sentinel_kwargs)
    primary: redis.Redis = sentinel.master_for(settings.sentinel_master, **primary_kwargs)
    return primary
