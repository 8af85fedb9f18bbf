"""What the runtime holds of Redis I/O, whichever Redis it is: the two-phase ``submit`` /
``result`` seam, its helpers, and redis-py's own pipeline for reads that want parsed replies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterError, RedisClusterException

from projectors.link import raise_errors, refused

RedisClient = redis.Redis | RedisCluster
Command = tuple[Any, ...]


class BatchNotApplied(redis.ConnectionError):
    """Part of a batch may not have run (a node failed or kept redirecting): send it again.

    A ``ConnectionError`` so that callers which already retry a batch on a lost connection
    (the projector loop) treat it alike: nothing committed, applying again is harmless."""


class Pending(Protocol):
    def result(self) -> list[Any]: ...

    def cancel(self) -> None: ...


class BatchIO(Protocol):
    def submit(self, commands: Sequence[Command]) -> Pending: ...


class Link(Protocol):
    """The runtime's seam (see :mod:`projectors.link`): ``submit`` now, ``result`` later."""

    def submit(self, commands: Sequence[Command]) -> Pending: ...

    def round_trip(self, commands: Sequence[Command]) -> list[Any]: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


def execute(io: Link | BatchIO, commands: Sequence[Command]) -> list[Any]:
    return io.submit(commands).result()


def pipelined(client: RedisClient, commands: Sequence[Command]) -> list[Any]:
    """Commands through redis-py's own pipeline, for its reply parsing (HGETALL → dict, …):
    reads on a cache miss. On a cluster it routes and follows redirections itself; when it gives
    up (a failover or resharding under way) that is :class:`BatchNotApplied`, as in the seam."""
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    try:
        return pipe.execute()
    except (ClusterError, RedisClusterException) as exc:
        raise BatchNotApplied(f"Redis Cluster: {exc}") from exc
    except redis.ResponseError as exc:  # e.g. BUSY: what the batches' replies raise too
        error = refused(exc)
        if error is None:
            raise
        raise error from exc


def execute_checked(io: Link | BatchIO, commands: Sequence[Command]) -> None:
    """Run ``commands`` and raise the first error, also one inside a transaction's EXEC reply."""
    raise_errors(execute(io, commands))
