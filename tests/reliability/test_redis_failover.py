"""Redis fails over under load: the primary is SIGKILLed, the Sentinel promotes the replica, and
the projectors (``DSH_REDIS_SENTINELS``) follow it; whatever the replica had not received yet is
rebuilt from the topic, and ``verify`` passes for every session.

The first test leaves to chance what the failover loses, and every session appends again after
it (a loss shows as a gap). The second cuts the replica off before some sessions take a last
turn, so that the failover loses that turn for certain, and the projectors must mend those
sessions without another event of theirs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from deploy.local.redis_sentinel import MASTER_NAME, LocalRedisSentinel
from producers import SessionClient
from projectors.keys import Keys
from servicekit.redis_clients import sentinel_primary
from servicekit.settings import RedisSettings
from tests.reliability.harness import (
    PARTITIONS,
    PROJECTIONS,
    Ack,
    History,
    Load,
    Namespace,
    Pipeline,
    Verdict,
    check_history,
    projections_behind,
    projections_reach,
    record_figures,
    run_load,
    script_step,
    sessions_spread,
    verify_all,
)
from tests.support import read_models
from tests.support.waiting import wait_for

TURN = 6  # events in a turn of the load's script (script_step)


@contextmanager
def running_sentinel(home: Path, down_after_ms: int = 1000) -> Iterator[LocalRedisSentinel]:
    from deploy.local.processes import free_ports

    primary_port, replica_port, sentinel_port = free_ports(3)
    local = LocalRedisSentinel(home, primary_port, replica_port, sentinel_port, down_after_ms)
    try:
        local.start()
        yield local
    finally:
        local.stop()


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[LocalRedisSentinel]:
    with running_sentinel(tmp_path / "redis") as local:
        yield local


@pytest.fixture
def patient_sentinel(tmp_path: Path) -> Iterator[LocalRedisSentinel]:
    """A Sentinel that still promotes a replica cut off from the primary for 20 s (ten times
    down-after-milliseconds): room for a loaded machine between the cut and the kill."""
    with running_sentinel(tmp_path / "redis", down_after_ms=2000) as local:
        yield local


def test_the_projectors_follow_a_replica_the_sentinel_promotes(
    ns: Namespace, load: Load, sentinel: LocalRedisSentinel
) -> None:
    primary, replica = sentinel.servers
    through_sentinel(ns, sentinel)
    with Pipeline(ns) as pipeline:

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            killed = time.monotonic()
            primary.process.kill()
            promoted = wait_for(
                lambda: sentinel.primary_port() == replica.port, 60, "the replica promoted"
            )
            return {"promoted_s": promoted, "failover_s": time.monotonic() - killed}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        verdict, extra["projector_catch_up_s"] = clean_and_verified(ns, sentinel, history)
        extra["service_restarts"] = pipeline.restarts()
        logs = "".join(p.log() for p in pipeline.projectors.values())
        extra["session_rebuilds"] = logs.count("rebuilding session")
        record_figures("Redis failover (Sentinel)", load, verdict, **extra)


def test_the_projectors_mend_quiet_sessions_a_failover_set_back(
    ns: Namespace, load: Load, patient_sentinel: LocalRedisSentinel
) -> None:
    """Quiet sessions (one per partition) take a turn that reaches the replica, and then, once
    the replica is cut off, a last turn the projectors apply in the primary and commit. The
    primary is killed; the replica promoted holds those sessions a turn behind. The load goes
    on on other sessions only, so each projector meets the failover at its next batch, and
    must rebuild the quiet sessions from the topic though they receive nothing more."""
    sentinel = patient_sentinel
    primary, replica = sentinel.servers
    through_sentinel(ns, sentinel)
    prefix = ns.key_prefix
    quiet = History(sessions_spread(PARTITIONS, "quiet"))
    first = {sid: TURN - 1 for sid in quiet.sessions}  # the last seq of each turn
    whole = {sid: 2 * TURN - 1 for sid in quiet.sessions}
    # The Sentinel promotes no replica whose link has been down for longer than ten times
    # down-after-milliseconds plus the time the primary has been down: the primary is killed
    # with room to spare (the replica counts its link's downtime in whole seconds).
    cut_bound_s = sentinel.down_after_ms * 10 / 1000 - 4
    old_db = redis.Redis(port=primary.port, socket_timeout=5)
    new_db = redis.Redis(port=replica.port, socket_timeout=5)
    commits = Commits(ns)
    with (
        old_db,
        new_db,
        commits,
        Pipeline(ns) as pipeline,
        SessionClient(settings=ns.kafka, timeout=30) as client,
    ):

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            take_turn(client, quiet, 0)
            wait_for(
                lambda: projections_reach(new_db, prefix, first, PROJECTIONS),
                60,
                "the quiet sessions' first turn on the replica",
                explain=lambda: projections_behind(new_db, prefix, first, PROJECTIONS),
            )
            cut = time.monotonic()
            cut_off(old_db)
            take_turn(client, quiet, 1)
            ends = commits.ends()
            wait_for(
                lambda: (
                    projections_reach(old_db, prefix, whole, PROJECTIONS) and commits.past(ends)
                ),
                cut_bound_s - (time.monotonic() - cut),
                "the quiet sessions' last turn applied in the primary and committed",
                explain=lambda: (
                    projections_behind(old_db, prefix, whole, PROJECTIONS)
                    + f"; committed {commits.committed()}, ends {ends}"
                ),
            )
            # The replica takes nothing more: what it holds now is what it is promoted with.
            held = applied(new_db, prefix, quiet.sessions)
            assert held == {p: first for p in PROJECTIONS}, f"the replica holds {held}"
            cut_s = time.monotonic() - cut
            killed = time.monotonic()
            primary.process.kill()
            promoted_s = wait_for(
                lambda: sentinel.primary_port() == replica.port, 60, "the replica promoted"
            )
            wait_for(
                lambda: projections_reach(new_db, prefix, whole, PROJECTIONS),
                60,
                "the quiet sessions mended in the promoted replica",
                explain=lambda: projections_behind(new_db, prefix, whole, PROJECTIONS),
            )
            mended_s = time.monotonic() - killed
            return {"cut_s": cut_s, "promoted_s": promoted_s, "quiet_mended_s": mended_s}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        everyone = History(history.sessions + quiet.sessions)
        everyone.acked = history.acked | quiet.acked
        verdict, extra["projector_catch_up_s"] = clean_and_verified(ns, sentinel, everyone)
        for name, projector in pipeline.projectors.items():
            log = projector.log()
            unmended = [
                sid
                for sid in quiet.sessions
                if f"rebuilding session {sid} from the topic (redis-failover)" not in log
            ]
            assert not unmended, f"the {name} projector never mended {unmended}"
        extra["service_restarts"] = pipeline.restarts()
        record_figures("Redis failover (Sentinel), quiet sessions mended", load, verdict, **extra)


def through_sentinel(ns: Namespace, sentinel: LocalRedisSentinel) -> None:
    """The projectors find the primary through the Sentinel."""
    ns.redis_url = sentinel.servers[0].url
    ns.redis_env = {
        "DSH_REDIS_SENTINELS": sentinel.sentinels,
        "DSH_REDIS_SENTINEL_MASTER": MASTER_NAME,
    }


def clean_and_verified(
    ns: Namespace, sentinel: LocalRedisSentinel, history: History
) -> tuple[Verdict, float]:
    """The history checked against the topic (nothing lost nor doubled), and every session of
    it verified against the promoted replica; the verdict, and how long the projectors took to
    catch up."""
    verdict = check_history(ns.kafka, history)
    verdict.assert_clean()
    store = sentinel_primary(
        RedisSettings(sentinels=sentinel.sentinels, sentinel_master=MASTER_NAME)
    )
    try:
        return verdict, verify_all(ns, store, history.sessions, 120)
    finally:
        store.close()


def cut_off(primary: redis.Redis) -> None:
    """From now on the replica receives none of the primary's writes: the primary drops its
    link, and the user the replica connects as may no longer sync. Stopping the replica would
    not do: what the primary sent waits in the replica's socket and is applied once it runs
    again. Cut off so, it stays up and answers the Sentinel, which then promotes it."""
    primary.execute_command("ACL", "SETUSER", "default", "-psync", "-sync")
    dropped = primary.execute_command("CLIENT", "KILL", "TYPE", "replica")
    assert dropped == 1, f"{dropped} replica links dropped"


def take_turn(client: SessionClient, quiet: History, turn: int) -> None:
    """The ``turn``-th turn of every quiet session, event by event, each acknowledged."""
    for i in range(turn * TURN, (turn + 1) * TURN):
        futures: dict[tuple[str, str], Future[Any]] = {}
        for sid in quiet.sessions:
            rid = f"{sid}/{i}"
            type_, data, op = script_step(i, rid)
            futures[sid, rid] = client.append_async(sid, type_, data, surface_op=op, request_id=rid)
        for (sid, rid), future in futures.items():
            ev = future.result()
            quiet.acked[sid].append(Ack(ev.seq, rid, time.monotonic()))


def applied(client: redis.Redis, prefix: str, sessions: list[str]) -> dict[str, dict[str, int]]:
    """Projection → session → the seq it has applied in ``client``'s Redis (-1: none)."""
    keys = Keys(prefix)
    return {
        p: {sid: read_models.applied(client, p, sid, keys) for sid in sessions} for p in PROJECTIONS
    }


class Commits:
    """The offsets the projectors' groups committed, read without joining the groups."""

    def __init__(self, ns: Namespace) -> None:
        self.topic = ns.kafka.topic("events")
        prefix = ns.projector_env()["DSH_PROJECTOR_GROUP_PREFIX"]
        config = {**ns.kafka.client_config(), "enable.auto.commit": False}
        self.probes = {p: Consumer({**config, "group.id": f"{prefix}-{p}"}) for p in PROJECTIONS}

    def __enter__(self) -> Commits:
        return self

    def __exit__(self, *exc: object) -> None:
        for probe in self.probes.values():
            probe.close()

    def ends(self) -> dict[int, int]:
        """Each partition's end: past every event acknowledged so far."""
        probe = next(iter(self.probes.values()))
        return {
            p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)[1]
            for p in range(PARTITIONS)
        }

    def committed(self) -> dict[str, dict[int, int]]:
        tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        return {
            name: {tp.partition: tp.offset for tp in probe.committed(tps, timeout=5)}
            for name, probe in self.probes.items()
        }

    def past(self, ends: dict[int, int]) -> bool:
        """Every group committed past ``ends``: the batches up to them were settled."""
        return all(
            offsets[p] >= end for offsets in self.committed().values() for p, end in ends.items()
        )
