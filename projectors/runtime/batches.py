"""A batch's decisions, with no Kafka client: decoded records in, Redis commands out, then
Redis' replies settled into applied, duplicate, gap or blocked.

Records are planned against the cached per-session states (:mod:`.sessions`). The session's
next seq is planned into one apply-script call; a seq at or below the state's is a duplicate;
one beyond the next is a gap, and the session is rebuilt from the topic; a blocked session's
events are counted, not applied (until a replay unblocks it: :mod:`.sessions` asks Redis). A
record the rules refuse, or that could not be decoded, blocks its session and becomes a dead
letter (:mod:`.poison` sends it). Whatever the cache believes, Redis decides:
:meth:`Planner.settle` reads each script's answer, and what Redis refused drops the session
from the cache. ``tests/unit/test_projector_batches.py`` tables both.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dsh.errors import SessionError
from projectors.projection import Projection
from projectors.records import Poison, Record
from projectors.runtime.poison import Command, DeadLetter, block_commands
from projectors.runtime.sessions import Entry
from projectors.scripts import APPLY

S = TypeVar("S")
log = logging.getLogger("projectors")

# The apply script's answers (lua/apply.lua), and the block script's.
APPLIED, DUPLICATE, GAP, BLOCKED = 1, 0, -1, -2


@dataclass
class Plan:
    commands: list[Command] = field(default_factory=list)
    # What each reply settles: None for the batch's update of the recent index.
    queued: list[Record | Poison | None] = field(default_factory=list)
    rebuild: dict[int, set[str]] = field(default_factory=dict)  # partition → sessions (gaps)
    dead: list[DeadLetter] = field(default_factory=list)  # to send before the batch commits


def recent_index(projection: Projection[Any], moved: dict[str, int]) -> list[Command]:
    """Sessions (→ the time of their last event applied) into the projection's recent index,
    a later time only (GT: a replay of old events never moves a session back), then all but
    its ``recent_sessions`` latest out. Outside any MULTI: the index has a slot of its own."""
    key = projection.keys.recent(projection.name)
    members = [x for sid, time in moved.items() for x in (time, sid)]
    keep = projection.recent_sessions
    return [("ZADD", key, "GT", *members), ("ZREMRANGEBYRANK", key, 0, -keep - 1)]


class Planner(Generic[S]):
    def __init__(
        self,
        projection: Projection[S],
        cache: OrderedDict[str, Entry[S]],
        stats: Counter[str],
        topic: str,
    ) -> None:
        self.projection = projection
        self.name = projection.name
        self.keys = projection.keys
        self.cache = cache
        self.stats = stats  # published to Prometheus once per batch, by the loop
        self.topic = topic

    def plan(self, items: Sequence[Record | Poison]) -> Plan:
        """Every session of a :class:`Record` among ``items`` must be cached."""
        out = Plan()
        commands, queued = out.commands, out.queued
        rebuild: dict[int, set[str]] = defaultdict(set)
        cache, projection = self.cache, self.projection
        plan, applied_of = projection.plan, projection.applied
        counts = {"blocked": 0, "duplicate": 0, "gap": 0}
        moved: dict[str, int] = {}  # session → time of its last event applied in the batch
        try:
            for item in items:
                if type(item) is not Record:
                    self._refuse(item, out)  # type: ignore[arg-type]
                    continue
                sid = item.session_id
                if rebuild and sid in rebuild[item.partition]:
                    continue
                entry = cache[sid]
                applied = applied_of(entry.state)
                seq = item.event.seq
                if entry.blocked:
                    counts["blocked"] += 1
                elif seq <= applied:
                    counts["duplicate"] += 1
                elif seq > applied + 1:
                    counts["gap"] += 1
                    rebuild[item.partition].add(sid)
                else:
                    try:
                        ops = plan(entry.state, item.event)
                    except SessionError as exc:
                        entry.blocked = True
                        poison = Poison(sid, exc, sid.encode(), None, item.partition, item.offset)
                        self._refuse(poison, out, seq=seq, record=item)
                        continue
                    head = entry.apply
                    if head is None:
                        keys = projection.all_keys(sid)
                        head = entry.apply = ("EVALSHA", APPLY.sha, len(keys), *keys)
                    commands.append((*head, seq, *ops))
                    queued.append(item)
                    moved[sid] = item.event.time
        finally:
            for result, n in counts.items():
                if n:
                    self.stats[result] += n
        if moved and projection.recent_sessions:
            index = recent_index(projection, moved)
            commands += index
            queued += [None] * len(index)
        out.rebuild = {p: s for p, s in rebuild.items() if s}
        return out

    def settle(
        self,
        queued: Sequence[Record | Poison | None],
        results: Sequence[Any],
        rebuild: dict[int, set[str]],
    ) -> None:
        """Count Redis' answer to each queued record; a session Redis found a gap in (or that
        failed) joins ``rebuild``."""
        applied = 0
        try:
            for item, result in zip(queued, results, strict=True):
                if type(item) is not Record:
                    continue
                if type(result) is list and result[0] == APPLIED:  # the usual case
                    applied += 1
                    continue
                sid = item.session_id
                if isinstance(result, Exception):
                    log.warning(
                        "projector %s: session %s seq %d: %s",
                        self.name,
                        sid,
                        item.seq,
                        result,
                        extra={"session": sid, "partition": item.partition, "seq": item.seq},
                    )
                    status = GAP
                else:
                    status = int(result[0])
                if status == APPLIED:
                    applied += 1
                elif status == DUPLICATE:
                    # Another process got there first: our cached state is not Redis's any more.
                    self.stats["duplicate"] += 1
                    self.cache.pop(sid, None)
                elif status == BLOCKED:
                    self.stats["blocked"] += 1
                    entry = self.cache.get(sid)
                    if entry is not None and not entry.blocked:  # news to this process: say so once
                        entry.blocked = True
                        log.info(
                            "projector %s: session %s is blocked; seq %d and later are not applied",
                            self.name,
                            sid,
                            item.seq,
                            extra={"session": sid, "partition": item.partition, "seq": item.seq},
                        )
                else:
                    self.stats["gap"] += 1
                    self.cache.pop(sid, None)
                    rebuild.setdefault(item.partition, set()).add(sid)
        finally:
            if applied:
                self.stats["applied"] += applied

    def _refuse(
        self, poison: Poison, out: Plan, seq: int = -1, record: Record | None = None
    ) -> None:
        """A dead letter; its session, if known, is blocked in this batch."""
        out.dead.append(DeadLetter(poison, seq, record))
        sid = poison.session_id
        if sid is None:
            return
        entry = self.cache.get(sid)
        if entry is not None:
            entry.blocked = True
        block = block_commands(self.keys, self.name, self.topic, poison, seq)
        out.commands += block
        out.queued += [poison] * len(block)
