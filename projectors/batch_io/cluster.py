"""Batches over a Redis Cluster, through redis-py's ``RedisCluster`` (the slot map, the nodes, a
connection pool per node).

The batch is split by hash slot into one group per primary, every group is written before any
is read (the primaries work concurrently: one round trip in all), and the replies are put back
in order. A command that was not run where it was sent — MOVED (the slot map changed: updated,
sent to the new owner), ASK (sent with ASKING to the node importing the slot), TRYAGAIN (a slot
half migrated), CLUSTERDOWN (waited for) or NOSCRIPT (sent again after loading the scripts on
that node) — is sent again, and only it; after a NOSCRIPT, so is everything that followed it on
that node, in order. A node that fails (connection lost, timeout) fails
the whole batch with :class:`BatchNotApplied` after the other nodes' replies were read: its
commands may or may not have run, so the caller must not commit offsets; it sends the batch
again, which the apply script makes harmless (seq ≤ applied is a duplicate), and the slot map
is read again first.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import ConnectionPool
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    RedisClusterException,
)

from projectors.batch_io.routing import first_key, redirected, units
from projectors.batch_io.seam import BatchNotApplied, Command, Pending
from projectors.batch_io.wire import Done, Flight
from projectors.link import Pending as LinkPending
from projectors.scripts import load_all

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
            return Done([])
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
        key = next((k for c in unit if (k := first_key(c)) is not None), None)
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
        self.units = units(commands)
        self.replies: list[Any] = [None] * len(commands)
        self.flights: list[tuple[ClusterNode, Flight, list[int], set[int]]] = []
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
                flight = Flight.send(self.io.pool(node), batch)
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
            missing: NoScriptError | None = None
            for u in ids:
                start, end = self.units[u]
                if u in asked:
                    next(got)  # ASKING's OK
                replies = [next(got) for _ in range(start, end)]
                self.replies[start:end] = replies
                reason = redirected(replies)
                if isinstance(reason, NoScriptError) and missing is None:
                    missing = reason
                if reason is None and missing is not None:
                    # Another process may have loaded the scripts on this node after the
                    # first refusal: what ran after it ran ahead of it (a session's later
                    # event before its earlier one is a gap). It is sent again in order,
                    # which the apply script makes harmless (seq <= applied: a duplicate).
                    reason = missing
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
