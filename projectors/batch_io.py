"""Batches of commands to Redis in two phases: ``submit(commands)`` writes them and returns at
once, ``pending.result()`` reads the replies, in the order of ``commands``, errors as values.

Between the two the caller may do other work (decode the next batch) while Redis runs this
one. Call ``result()`` (or ``cancel()``) exactly once: it gives the connections back.

Commands are packed by hiredis directly: redis-py's pipeline encodes each argument in Python,
which cost more per event than everything else on the Redis side of a batch. Replies are read
straight from redis-py's hiredis reader.

Two implementations, chosen by the client (:func:`batch_io`):

- one Redis: one connection, one write, one read of every reply;
- Redis Cluster: the batch is split by hash slot into one group per primary, every group is
  written before any is read (the primaries work concurrently: one round trip in all), and the
  replies are put back in order. A command that was not run where it was sent — MOVED (the
  slot map changed: updated, sent to the new owner), ASK (sent with ASKING to the node
  importing the slot), TRYAGAIN (a slot half migrated) or CLUSTERDOWN (waited for) — is sent
  again, and only it. A node that fails (connection lost, timeout) fails the whole batch with
  :class:`BatchNotApplied` after the other nodes' replies were read: its commands may or may
  not have run, so the caller must not commit offsets; it sends the batch again, which the
  apply script makes harmless (seq ≤ applied is a duplicate), and the slot map is read again
  first.

Both send again, after loading the scripts on that node, what Redis refused with NOSCRIPT (a
restarted or flushed server, a promoted replica).

The unit of routing is a command, or a ``MULTI`` … ``EXEC`` block (rebuilds): a block goes to
one node, whole, and is sent again whole; all its keys must share a slot. A command's slot is
that of its first key: position 1, or the first key of ``EVALSHA``/``EVAL``/``FCALL``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import hiredis
import redis
from redis._parsers.hiredis import _HiredisParser
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import ConnectionPool
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)

from projectors.link import Pending as LinkPending
from projectors.link import RedisLink, raise_errors, read_replies
from projectors.scripts import load_all

log = logging.getLogger("projectors")

RedisClient = redis.Redis | RedisCluster
Command = tuple[Any, ...]

_SCRIPT_CALLS = frozenset({"EVALSHA", "EVAL", "FCALL", "EVALSHA_RO", "EVAL_RO", "FCALL_RO"})
_NO_KEY = frozenset({"MULTI", "EXEC", "DISCARD", "PING", "ASKING"})


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


def batch_io(client: RedisClient) -> Link:
    """One Redis: :class:`~projectors.link.RedisLink` (one connection, batches may overlap).
    A cluster: :class:`ClusterLink`."""
    if isinstance(client, RedisCluster):
        return ClusterLink(client)
    return RedisLink(client)


class ClusterLink:
    """The seam over a Redis Cluster. Each batch is run to its end when it is submitted: two
    batches in flight at once would travel over separate per-node connections, and a node
    could then run a later batch's event of a session before an earlier one (a gap, so a
    rebuild). A cluster therefore gets no overlap of Redis with the next batch's planning."""

    def __init__(self, client: RedisCluster) -> None:
        self.client = client
        self.io = ClusterBatchIO(client)

    def submit(self, commands: Sequence[Command]) -> Pending:
        return LinkPending.finished(self.io.submit(commands).result())

    def round_trip(self, commands: Sequence[Command]) -> list[Any]:
        return self.io.submit(commands).result()

    def reset(self) -> None:
        """Nothing is left in flight between calls."""

    def close(self) -> None:
        """The client's pools belong to the client."""


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


def execute_checked(io: Link | BatchIO, commands: Sequence[Command]) -> None:
    """Run ``commands`` and raise the first error, also one inside a transaction's EXEC reply."""
    raise_errors(execute(io, commands))


class _Done:
    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies

    def result(self) -> list[Any]:
        return self.replies

    def cancel(self) -> None:
        pass


# --- the wire --------------------------------------------------------------------------------


class _Flight:
    """Commands written on one connection whose replies are not read yet."""

    def __init__(self, pool: ConnectionPool, conn: Any, count: int) -> None:
        self.pool, self.conn, self.count = pool, conn, count

    @classmethod
    def send(cls, pool: ConnectionPool, commands: Sequence[Command]) -> _Flight:
        conn = pool.get_connection()
        try:
            packed = [b"".join(map(hiredis.pack_command, commands))]
            conn.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)
            raise
        return cls(pool, conn, len(commands))

    def read(self) -> list[Any]:
        conn = self.conn
        try:
            parser = getattr(conn, "_parser", None)
            if type(parser) is _HiredisParser and parser._reader is not None:
                return read_replies(parser, self.count)
            results: list[Any] = []
            for _ in range(self.count):
                try:
                    results.append(conn.read_response())
                except redis.ResponseError as exc:  # one command failed; the stream stays in step
                    results.append(exc)
            return results
        except BaseException:
            conn.disconnect()  # replies may be left unread
            raise
        finally:
            self.pool.release(conn)

    def drop(self) -> None:
        self.conn.disconnect()
        self.pool.release(self.conn)


def _units(commands: Sequence[Command]) -> list[tuple[int, int]]:
    """``[start, end)`` of each command, or of each MULTI … EXEC block as one."""
    units: list[tuple[int, int]] = []
    i, n = 0, len(commands)
    while i < n:
        if commands[i][0] == "MULTI":
            end = i + 1
            while end < n and commands[end][0] != "EXEC":
                end += 1
            units.append((i, min(end + 1, n)))
            i = end + 1
        else:
            units.append((i, i + 1))
            i += 1
    return units


def _needs_scripts(replies: Sequence[Any]) -> bool:
    return any(
        type(r) is NoScriptError or (type(r) is list and any(type(x) is NoScriptError for x in r))
        for r in replies
    )


def _first_key(command: Command) -> Any:
    name = command[0]
    if name in _SCRIPT_CALLS:
        return command[3] if len(command) > 3 and int(command[2]) > 0 else None
    if name in _NO_KEY or len(command) < 2:
        return None
    return command[1]


# --- Redis Cluster ----------------------------------------------------------------------------

_ATTEMPTS = 8  # rounds of re-sending (redirections, TRYAGAIN) one result() does before giving up
_BACKOFF_S = 0.05


class ClusterBatchIO:
    """Batch I/O over redis-py's ``RedisCluster``, which keeps the slot map, the nodes and a
    connection pool per node; the batch itself is routed, packed and read here (its pipeline
    would encode every argument in Python and cannot hold MULTI blocks of many slots)."""

    def __init__(self, client: RedisCluster) -> None:
        self.client = client
        self.stale = False  # a node failed: read the slot map again before the next batch
        self.resent: Counter[str] = Counter()  # commands sent again, by reason (MovedError, …)

    def submit(self, commands: Sequence[Command]) -> Pending:
        if not commands:
            return _Done([])
        if self.stale:
            self.refresh()
        return _ClusterPending(self, commands)

    def refresh(self) -> None:
        try:
            self.client.nodes_manager.initialize()
        except (redis.RedisError, RedisClusterException) as exc:
            raise BatchNotApplied(f"Redis Cluster: cannot read the slot map: {exc}") from exc
        self.stale = False

    def node_of(self, unit: Sequence[Command], slots: dict[Any, int]) -> ClusterNode:
        key = next((k for c in unit if (k := _first_key(c)) is not None), None)
        manager = self.client.nodes_manager
        try:
            if key is None:
                node: ClusterNode | None = self.client.get_default_node()  # type: ignore[no-untyped-call]
                if node is None:
                    raise SlotNotServed("no node")
                return node
            slot = slots.get(key)
            if slot is None:
                slot = slots[key] = key_slot(key if type(key) is bytes else str(key).encode())
            return manager.get_node_from_slot(slot)
        except RedisClusterException as exc:  # e.g. a slot not covered during a failover
            self.stale = True
            raise BatchNotApplied(f"Redis Cluster: {exc}") from exc

    def pool(self, node: ClusterNode) -> ConnectionPool:
        pool: ConnectionPool = self.client.get_redis_connection(node).connection_pool
        return pool


class SlotNotServed(RedisClusterException):
    pass


class _ClusterPending:
    def __init__(self, io: ClusterBatchIO, commands: Sequence[Command]) -> None:
        self.io = io
        self.commands = commands
        self.units = _units(commands)
        self.replies: list[Any] = [None] * len(commands)
        self.flights: list[tuple[ClusterNode, _Flight, list[int], set[int]]] = []
        self.failures: list[BaseException] = []
        self.slots: dict[Any, int] = {}
        self.done = False
        self.error: BaseException | None = None  # raised again by a second result()
        self._send(range(len(self.units)), {})

    def _send(self, unit_ids: Sequence[int], asking: dict[int, ClusterNode]) -> None:
        """One write per node: the units routed to it (after ASKING, those told to ask)."""
        by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
        try:
            for u in unit_ids:
                start, end = self.units[u]
                node = asking.get(u) or self.io.node_of(self.commands[start:end], self.slots)
                by_node.setdefault(node.name, (node, []))[1].append(u)
        except BaseException:
            self.cancel()
            raise
        for node, ids in by_node.values():
            asked = {u for u in ids if u in asking}
            batch: list[Command] = []
            for u in ids:
                start, end = self.units[u]
                if u in asked:
                    batch.append(("ASKING",))
                batch += self.commands[start:end]
            try:
                flight = _Flight.send(self.io.pool(node), batch)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                self.failures.append(exc)
                continue
            self.flights.append((node, flight, ids, asked))

    def _collect(self) -> dict[int, tuple[ClusterNode, BaseException]]:
        """Read every flight; returns the units to send again, with the reason."""
        again: dict[int, tuple[ClusterNode, BaseException]] = {}
        flights, self.flights = self.flights, []
        for node, flight, ids, asked in flights:
            try:
                got = iter(flight.read())
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                self.failures.append(exc)
                continue
            for u in ids:
                start, end = self.units[u]
                if u in asked:
                    next(got)  # ASKING's OK
                replies = [next(got) for _ in range(start, end)]
                self.replies[start:end] = replies
                reason = _redirected(replies)
                if reason is not None:
                    again[u] = (node, reason)
        return again

    def result(self) -> list[Any]:
        if self.error is not None:
            raise self.error
        if self.done:
            return self.replies
        try:
            return self._result()
        except BaseException as exc:
            self.cancel()
            self.error = exc
            raise

    def _result(self) -> list[Any]:
        attempt = 0
        while True:
            again = self._collect()
            if self.failures:
                self.io.stale = True
                first = self.failures[0]
                raise BatchNotApplied(f"Redis Cluster node failed: {first}") from first
            if not again:
                self.done = True
                return self.replies
            if attempt == _ATTEMPTS:
                break
            asking = self._follow(again, attempt)
            self._send(sorted(again), asking)
            attempt += 1
        self.io.stale = True
        reasons = sorted({type(reason).__name__ for _, reason in again.values()})
        raise BatchNotApplied(
            f"Redis Cluster: {len(again)} command(s) still redirected after {_ATTEMPTS} tries "
            f"({', '.join(reasons)})"
        )

    def _follow(
        self, again: dict[int, tuple[ClusterNode, BaseException]], attempt: int
    ) -> dict[int, ClusterNode]:
        """Act on each reason to send again; returns the units to send with ASKING, by node."""
        manager = self.io.client.nodes_manager
        asking: dict[int, ClusterNode] = {}
        wait = False
        scripts_loaded: set[str] = set()
        for u, (node, reason) in again.items():
            self.io.resent[type(reason).__name__] += 1
            if isinstance(reason, MovedError):
                manager.move_slot(reason)
            elif isinstance(reason, AskError):
                target = manager.get_node(host=reason.host, port=int(reason.port))
                if target is None:  # a node the map does not know yet
                    self.io.refresh()
                    target = manager.get_node(host=reason.host, port=int(reason.port))
                if target is not None:
                    asking[u] = target
            elif isinstance(reason, NoScriptError):
                if node.name not in scripts_loaded:
                    load_all(self.io.client.get_redis_connection(node))
                    scripts_loaded.add(node.name)
            else:  # TRYAGAIN (slot half migrated), CLUSTERDOWN (failover under way)
                wait = True
        if wait:
            time.sleep(_BACKOFF_S * (attempt + 1))
            if any(isinstance(r, ClusterDownError) for _, r in again.values()):
                self.io.refresh()
        return asking

    def cancel(self) -> None:
        flights, self.flights = self.flights, []
        for _, flight, _, _ in flights:
            flight.drop()
        self.done = True


_REDIRECTS = (AskError, TryAgainError, ClusterDownError)  # MovedError is an AskError


def _redirected(replies: Sequence[Any]) -> BaseException | None:
    """Why a unit did not run on the node it was sent to, if it did not: a redirection (in a
    MULTI block, a queued command's error, the EXEC then aborted) or a missing script."""
    for reply in replies:
        if isinstance(reply, _REDIRECTS):
            return reply
    for reply in replies:
        if type(reply) is NoScriptError:
            return reply
        if type(reply) is list:
            for inner in reply:
                if type(inner) is NoScriptError:
                    return inner
    return None
