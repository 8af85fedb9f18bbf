"""How a projector process notices that Redis lost its data: its sentinel key and the marks
of the partitions it projected (docs/read-models.md, "Lost Redis").

One Redis holds one sentinel and one hash of marks. A Redis Cluster loses data one primary at
a time (a FLUSHALL, a primary restarted empty), so there every primary holds its own: the key
names end in a hash tag ``{n<i>}`` chosen to fall in a slot that primary serves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError

from projectors.batch_io import RedisClient
from projectors.keys import Keys

_TAG_SEARCH = 200_000  # tags tried when looking for one that lands on a given primary


class Marks:
    def __init__(self, client: RedisClient, keys: Keys, projection: str, instance: str) -> None:
        self.client = client
        self.instance = instance
        self.sentinel = keys.sentinel(projection, instance)
        self.initialized = f"{keys.prefix}:projection:{projection}:initialized"
        # Cluster: the tags whose sentinel this process has set. Only those are checked: a
        # primary given other slots (resharding) gets a new tag, set rather than checked, so
        # a moved slot is not taken for a lost one. A promoted replica keeps its primary's
        # slots, hence its tag and (replicated) sentinel.
        self._set_tags: set[str] = set()

    def touch(self) -> None:
        """Set the sentinel everywhere (the process starts)."""
        for client, suffix, _ in self._sentinels():
            client.set(self.sentinel + suffix, "1", ex=600)

    def alive(self) -> bool:
        """False when a node lost the sentinel: it was flushed or restarted empty. The sentinel
        is set again there, so one loss is reported once."""
        lost = False
        try:
            for client, suffix, known in self._sentinels():
                key = self.sentinel + suffix
                if known and client.set(key, "1", ex=600, xx=True):
                    continue
                client.set(key, "1", ex=600)
                lost = lost or known
        except AskError:  # MOVED or ASK: the slot map is stale, or a slot is migrating
            self._refresh()
            return not lost  # what this round saw; the rest is checked next round
        return not lost

    def unmarked(self, partitions: Sequence[int]) -> set[int]:
        """The partitions some node has no mark for: that node holds nothing of them."""
        fields = [str(p) for p in partitions]
        out: set[int] = set()
        for client, suffix in self._mark_nodes():
            marks = client.hmget(self.initialized + suffix, fields)
            out.update(p for p, mark in zip(partitions, marks, strict=True) if mark is None)
        return out

    def mark(self, partitions: Iterable[int]) -> None:
        fields = [str(p) for p in partitions]
        if fields:
            for client, suffix in self._mark_nodes():
                client.hset(self.initialized + suffix, mapping=dict.fromkeys(fields, self.instance))

    # --- where ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        if isinstance(self.client, RedisCluster):
            self.client.nodes_manager.initialize()

    def _sentinels(self) -> list[tuple[redis.Redis, str, bool]]:
        """(node, key suffix, whether this process set the sentinel there before)."""
        if not isinstance(self.client, RedisCluster):
            return [(self.client, "", True)]
        nodes = []
        for node, tag in _tags(self.client, self._set_tags):
            nodes.append(
                (self.client.get_redis_connection(node), _suffix(tag), tag in self._set_tags)
            )
            self._set_tags.add(tag)
        return nodes

    def _mark_nodes(self) -> list[tuple[redis.Redis, str]]:
        """Marks are read by other processes later: each primary's is at a fixed tag, the
        first ``n<i>`` landing on it (a resharding may move it: the partitions are then
        replayed once more, which is safe)."""
        if not isinstance(self.client, RedisCluster):
            return [(self.client, "")]
        return [
            (self.client.get_redis_connection(node), _suffix(tag))
            for node, tag in _tags(self.client, ())
        ]


def _tags(client: RedisCluster, preferred: Iterable[str]) -> list[tuple[ClusterNode, str]]:
    """For each primary serving slots: a tag that lands in one of them, a preferred one if any
    does, else the first ``n<i>`` that does."""
    slots = client.nodes_manager.slots_cache
    owners = {nodes[0].name: nodes[0] for nodes in list(slots.values()) if nodes}
    tags: dict[str, str] = {}

    def take(tag: str) -> None:
        served = slots.get(key_slot(tag.encode()))
        if served and served[0].name not in tags:
            tags[served[0].name] = tag

    for tag in sorted(preferred):
        take(tag)
    for i in range(_TAG_SEARCH):
        if len(tags) >= len(owners):
            break
        take(f"n{i}")
    return [(owners[name], tag) for name, tag in tags.items() if name in owners]


def _suffix(tag: str) -> str:
    return ":{" + tag + "}"
