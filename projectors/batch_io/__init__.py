"""Batches of commands to Redis in two phases: ``submit(commands)`` writes them and returns at
once, ``pending.result()`` reads the replies, in the order of ``commands``, errors as values.

Between the two the caller may do other work (decode the next batch) while Redis runs this
one. Call ``result()`` (or ``cancel()``) exactly once: it gives the connections back.

Commands are packed by hiredis directly: redis-py's pipeline encodes each argument in Python,
which cost more per event than everything else on the Redis side of a batch. Replies are read
straight from redis-py's hiredis reader.

Two implementations, chosen by the client (:func:`batch_io`):

- one Redis: one connection, one write, one read of every reply (:mod:`projectors.link`);
- Redis Cluster: the batch split by hash slot, one write per primary, redirections and
  NOSCRIPT sent again (:mod:`.cluster`).

Its parts, each a module:

- :mod:`.seam`: the protocols the runtime holds, ``execute``, ``pipelined``, ``BatchNotApplied``;
- :mod:`.cluster`: batches over a Redis Cluster, and the ``ClusterLink`` over them;
- :mod:`.routing`: a batch's units, their keys, why one is sent again (no I/O);
- :mod:`.wire`: a batch written on one node's connection, its replies read later.
"""

from redis.cluster import RedisCluster

from projectors.batch_io.cluster import ClusterBatchIO, ClusterLink
from projectors.batch_io.seam import (
    BatchIO,
    BatchNotApplied,
    Command,
    Link,
    Pending,
    RedisClient,
    execute,
    execute_checked,
    pipelined,
)
from projectors.link import RedisLink

__all__ = [
    "BatchIO",
    "BatchNotApplied",
    "ClusterBatchIO",
    "ClusterLink",
    "Command",
    "Link",
    "Pending",
    "RedisClient",
    "batch_io",
    "execute",
    "execute_checked",
    "pipelined",
]


def batch_io(client: RedisClient) -> Link:
    """One Redis: :class:`~projectors.link.RedisLink` (one connection, batches may overlap).
    A cluster: :class:`ClusterLink`."""
    if isinstance(client, RedisCluster):
        return ClusterLink(client)
    return RedisLink(client)
