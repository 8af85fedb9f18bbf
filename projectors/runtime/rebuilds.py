"""Sessions rebuilt from the topic: after a gap (Redis lost a session's state), after Redis
failed and came back behind what was applied (:mod:`.loop`), and for ``dsh replay``
(:mod:`projectors.replay`), which also catches rebuilt sessions up.

A rebuild plans the session's whole log as the live path does, folds the ops into the keys'
final contents (:class:`~projectors.fold.Image`) and writes them in one MULTI per session, so
a reader sees the old projection or the new one, never a mix.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from dsh.errors import SessionError
from projectors import metrics
from projectors.errors import PoisonRecordError
from projectors.fold import Image
from projectors.link import raise_errors
from projectors.projection import Projection
from projectors.records import Poison, Record
from projectors.runtime.batches import Planner, recent_index
from projectors.runtime.poison import Command, PoisonRecords, block_commands
from projectors.runtime.sessions import Entry, SessionStore
from projectors.topic_reader import read_sessions
from servicekit.settings import KafkaSettings

S = TypeVar("S")
log = logging.getLogger("projectors")

# A rebuild's marks outlive a process that died during it by at most this long (a reader
# then says SESSION_REBUILDING needlessly); a rebuild deletes them when it ends. Long enough
# for the rebuild of one partition's named sessions.
MARK_TTL_S = 600


class _Revoked(Exception):
    """The partition being rebuilt was revoked: its rebuild stops where it is."""


class Rebuilds(Generic[S]):
    def __init__(
        self,
        projection: Projection[S],
        kafka: KafkaSettings,
        topic: str,
        store: SessionStore[S],
        planner: Planner[S],
        poison: PoisonRecords,
        stats: Counter[str],
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        self.projection = projection
        self.name = projection.name
        self.keys = projection.keys
        self.kafka = kafka
        self.topic = topic
        self.store = store
        self.planner = planner
        self.poison = poison
        self.stats = stats
        # The service's liveness, beaten as a rebuild makes progress: a gap's rebuild scans
        # its partition from the start, which may take longer than the stall bound.
        self.beat = beat

    def rebuild(
        self,
        sessions: Mapping[int, set[str]],
        cause: str,
        hold: Callable[[int], bool] | None = None,
        rebuilt: Callable[[int, set[str]], None] | None = None,
    ) -> set[int]:
        """Replace each session's keys (partition → sessions) with a projection of its whole
        log, atomically. ``hold(partition)`` is asked before a partition's rebuild and at each
        beat of it: it may serve the consumer group meanwhile, and says whether the partition
        is still this process's to write. Once it says no, nothing more of that partition is
        written (its next owner may already apply later events, which a rewrite from an older
        scan would set back). Returns the partitions abandoned so. ``rebuilt(partition,
        sessions)`` is told of each partition whose sessions are all rewritten."""
        abandoned: set[int] = set()
        for partition, sids in sessions.items():
            if hold is not None and not hold(partition):
                abandoned.add(partition)
                self._abandoned(partition)
                continue
            for sid in sorted(sids):
                log.info(
                    "projector %s: rebuilding session %s from the topic (%s)",
                    self.name,
                    sid,
                    cause,
                    extra={"session": sid, "partition": partition, "cause": cause},
                )
            beat = self.beat if hold is None else self._held_beat(partition, hold)
            try:
                with self.marked(sids, cause):
                    logs = read_sessions(self.kafka, self.topic, partition, sids, beat=beat)
                    self.rebuild_logs(logs, cause, beat=beat)
                if rebuilt is not None:
                    rebuilt(partition, sids)
            except _Revoked:
                abandoned.add(partition)
                self._abandoned(partition)
                log.info(
                    "projector %s: partition %d revoked while rebuilding %d session(s) of it, "
                    "or the projector stopping: left to whoever applies it next",
                    self.name,
                    partition,
                    len(sids),
                    extra={"partition": partition, "cause": cause},
                )
        return abandoned

    def _abandoned(self, partition: int) -> None:
        self.stats["rebuilds_abandoned"] += 1
        metrics.REBUILDS_ABANDONED.labels(self.name).inc()

    def _held_beat(self, partition: int, hold: Callable[[int], bool]) -> Callable[[], None]:
        def beat() -> None:
            self.beat()
            if not hold(partition):
                raise _Revoked(partition)

        return beat

    @contextmanager
    def marked(self, sids: Collection[str], cause: str) -> Iterator[None]:
        """Readers see that the sessions are being rebuilt until this ends: until then they
        are served what was there before, which may be stale. (A full `dsh replay` marks
        nothing: its forked workers do not share this process's Redis link.)"""
        keys = [self.keys.rebuilding(self.name, sid) for sid in sids]
        mark = json.dumps({"cause": cause, "since": int(time.time() * 1000)})
        link = self.store.link
        # One command per key: on a cluster each session's key lives in its own slot.
        raise_errors(link.round_trip([("SET", key, mark, "EX", MARK_TTL_S) for key in keys]))
        try:
            yield
        finally:
            try:
                raise_errors(link.round_trip([("DEL", key) for key in keys]))
            except Exception as exc:  # the rebuild's own outcome matters more; marks expire
                log.warning(
                    "projector %s: could not clear the rebuild marks of %d session(s) (%s); "
                    "they expire within %d s",
                    self.name,
                    len(keys),
                    exc,
                    MARK_TTL_S,
                )

    def catch_up(self, items: Sequence[Record | Poison]) -> None:
        """Apply records read after :meth:`rebuild_logs` wrote their sessions, the way the
        consumer loop applies a batch (next seq only): a replay's rewrite may have set a
        session back behind what a running projector had already applied from the records
        after the replay's scan. A session with a poison record here is rebuilt from its whole
        log, which blocks it, rather than dead-lettered again (the running projector does)."""
        poisoned: dict[int, set[str]] = defaultdict(set)
        for item in items:
            if type(item) is not Record and item.session_id is not None:
                poisoned[item.partition].add(item.session_id)
        records = [
            i
            for i in items
            if type(i) is Record and i.session_id not in poisoned.get(i.partition, ())
        ]
        if not records and not poisoned:
            return
        self.store.load({i.session_id: i.partition for i in records})
        plan = self.planner.plan(records)
        self.poison.deliver(plan.dead)
        rebuild = plan.rebuild
        self.planner.settle(plan.queued, self.store.link.round_trip(plan.commands), rebuild)
        for partition, sids in poisoned.items():
            rebuild.setdefault(partition, set()).update(sids)
        if rebuild:
            self.rebuild(rebuild, cause="replay")
        self.poison.flush()  # what planning refused (an invalid world) was dead-lettered

    def rebuild_logs(
        self,
        logs: Mapping[str, Sequence[Record | Poison]],
        cause: str,
        chunk: int = 20_000,
        beat: Callable[[], None] | None = None,
    ) -> int:
        """Project each session's whole log into its keys, one MULTI per session so a reader
        sees the old projection or the new one, never a mix; many sessions per round trip.
        Poison records block the session but are not dead-lettered again: the consumer loop
        sends every poison record it reads. Returns the number of events applied."""
        batch: list[Command] = []
        applied = 0
        link, cache = self.store.link, self.store.cache
        for sid, items in logs.items():
            commands, state, blocked = self._commands(sid, items)
            batch += commands
            applied += self.projection.applied(state) + 1
            partition = next((i.partition for i in items if type(i) is Record), -1)
            cache[sid] = Entry(state, blocked, partition=partition)
            metrics.REBUILDS.labels(self.name, cause).inc()
            self.stats["rebuilt"] += 1
            if len(batch) >= chunk:
                raise_errors(link.round_trip(batch))
                batch = []
                (beat or self.beat)()
        if batch:
            raise_errors(link.round_trip(batch))
        return applied

    def _commands(
        self, sid: str, items: Sequence[Record | Poison]
    ) -> tuple[list[Command], S, bool]:
        """What rewrites the session's keys, its state after the log, and whether it is blocked."""
        projection = self.projection
        state = projection.fresh()
        image = Image(projection.all_keys(sid))
        block: list[Command] = []
        moved = None  # the time of the last event applied
        for item in items:
            if isinstance(item, Poison):
                block = block_commands(self.keys, self.name, self.topic, item, -1)
                self._log_blocked(sid, item.partition, item.error)
                break
            applied = projection.applied(state)
            if item.seq <= applied:
                continue  # a duplicate in the log itself; never applied twice
            try:
                if item.seq > applied + 1:
                    raise PoisonRecordError(
                        f"session {sid}: the log jumps from seq {applied} to {item.seq}"
                    )
                ops = projection.plan(state, item.event)
            except SessionError as exc:
                poison = Poison(sid, exc, sid.encode(), None, item.partition, item.offset)
                block = block_commands(self.keys, self.name, self.topic, poison, item.seq)
                self._log_blocked(sid, item.partition, exc, item.seq)
                break
            image.apply(item.seq, ops)
            moved = item.event.time
        # The blocked set indexes the meta hashes (the truth, which the apply script reads)
        # and lives in a slot of its own on a cluster, so it stays out of the session's MULTI:
        # the session leaves it before, and joins it after, its keys are rewritten.
        commands: list[Command] = [
            ("SREM", self.keys.blocked(self.name), sid),
            ("MULTI",),
            ("DEL", *image.keys),
            *image.commands(),
            *block[:1],  # the BLOCK script call
            ("EXEC",),
            *block[1:],  # SADD to the blocked set
        ]
        if moved is not None and projection.recent_sessions:
            commands += recent_index(projection, {sid: moved})
        return commands, state, bool(block)

    def _log_blocked(self, sid: str, partition: int, error: SessionError, seq: int = -1) -> None:
        context: dict[str, Any] = {"session": sid, "partition": partition, "code": error.code}
        if seq >= 0:
            context["seq"] = seq
        log.warning(
            "projector %s: rebuilding session %s: its log cannot be applied, session blocked: "
            "[%s] %s",
            self.name,
            sid,
            error.code,
            error.message,
            extra=context,
        )
