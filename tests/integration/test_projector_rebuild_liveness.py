"""A gap's rebuild scans the session's partition from its first offset: on a large partition
that outlasts the liveness bound while it makes progress, and a probe that failed then would
restart the projector into the same scan. So the scan beats the service's liveness as it goes:
counted here, not timed, as a busy machine's pauses would make any stall bound flaky."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from prometheus_client import REGISTRY
from pydantic import SecretStr

import dsh
from cli.wiring import build_runtime
from projectors.runtime import Runtime
from projectors.settings import ProjectorSettings
from projectors.views import Views
from servicekit.health import Health
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings, RedisSettings
from tests.conftest import TEST_PARTITIONS, Servers
from tests.integration.projector_support import (
    events_of,
    group_lag,
    publish,
    set_back,
    simple_session,
)
from tests.support.read_models import applied, applies
from tests.support.waiting import wait_for

FILLER = 20_000  # other records of the partition, which the scan reads past


def test_a_rebuild_scanning_a_large_partition_keeps_the_projector_alive(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    session = simple_session("rebuilt-alive", turns=2)
    partition = partition_for(session.id, TEST_PARTITIONS)
    keys = (f"fill-{i}" for i in itertools.count())
    same = itertools.islice((k for k in keys if partition_for(k, TEST_PARTITIONS) == partition), 64)
    fillers = list(same)
    publish(topics, ((fillers[i % 64], b"not an event") for i in range(FILLER)), 5_000)
    publish(topics, events_of(session))

    health = Health()
    beats: list[float] = []
    beat = health.beat

    def counted() -> None:
        beats.append(time.monotonic())
        beat()

    health.beat = counted  # type: ignore[method-assign]
    runtime = build_runtime(
        "surface",
        topics,
        RedisSettings(url=SecretStr(servers.redis_url)),
        ProjectorSettings(group_prefix=f"g-{topics.topic_prefix}", projections=""),
        health,
    )
    beats.clear()
    runtime.rebuilds.rebuild({partition: {session.id}}, cause="gap")
    # At least one beat per thousand records scanned (the partition holds the session too).
    assert len(beats) >= FILLER // 1_000, f"{len(beats)} beats while scanning {FILLER} records"
    view = Views(redis_client, timeout_s=0).surface(session.id)
    assert view.applied == len(session) - 1 and view.messages == session.derive_messages()


# The broker's group.min.session.timeout.ms is 6 s, and librdkafka wants the poll interval at
# least the session timeout: the shortest interval a test can set.
POLL_INTERVAL_MS = 6_000
SLOW_BEAT_S = 1.5  # a scan's pace: one beat per thousand records, each this long after it


def test_a_rebuild_longer_than_the_poll_interval_keeps_the_projector_in_its_group(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """A gap's rebuild that scans for longer than max.poll.interval.ms: the projector stays a
    member the whole time (its partitions are never revoked nor lost, no commit fails), rebuilds
    the session once, and applies the event that revealed the gap; the events published while
    it scans are applied after it, each once."""
    session = simple_session("rebuilt-member", turns=2)
    meanwhile = simple_session("published-meanwhile", turns=3)
    with _a_gap_rebuilt_slowly(topics, servers, redis_client, session, SLOW_BEAT_S) as slow:
        runtime, start = slow.runtime, slow.start
        publish(topics, events_of(meanwhile))
        wait_for(
            lambda: (
                applied(redis_client, "surface", session.id) == start.seq
                and applied(redis_client, "surface", meanwhile.id) == len(meanwhile) - 1
            ),
            timeout_s=120,
            what="the session rebuilt, then the events published during its scan applied",
            explain=lambda: f"stats {dict(runtime.stats)}",
        )
    beats = slow.beats.count
    # The scan outlasted the poll interval twice over (counted in beats, not timed).
    assert beats * SLOW_BEAT_S >= 2 * POLL_INTERVAL_MS / 1000, f"{beats} beats"
    stats = runtime.stats
    assert stats["rebuilt"] == 1, dict(stats)
    assert stats["partitions_revoked"] == 0 and stats["commit_failed"] == 0, dict(stats)
    assert stats["partitions_assigned"] == TEST_PARTITIONS, dict(stats)
    view = Views(redis_client, timeout_s=0).surface(session.id)
    assert view.applied == start.seq and view.messages == session.derive_messages()
    assert applies(redis_client, "surface", meanwhile.id) == len(meanwhile)  # each once


def test_a_partition_revoked_during_a_rebuild_is_left_to_its_next_owner(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """A gap in a session of every partition, and a second projector joining the group while
    the first one scans for them: the partitions that move are rebuilt by their new owner, the
    first one abandons their rebuilds, stays a member throughout and commits none of them; every
    session ends up whole, every event applied once."""

    gapped = [simple_session(_on(p, "moved"), turns=2) for p in range(TEST_PARTITIONS)]
    # 3,000 events a partition: each scan takes three beats or more.
    fillers = [simple_session(_on(p, "filler"), turns=500) for p in range(TEST_PARTITIONS)]
    publish(topics, events_of(*fillers, *gapped), 2_000)

    settings = _short_poll_interval(topics)
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    first = build_runtime("surface", topics, redis_settings, settings)
    abandoned_before = _abandoned_metric()
    # Which partitions move is the assignor's choice: so that some of them are certainly
    # being rebuilt when they go, one batch holds all the gaps and the rebuild waits, serving
    # the group, until the rebalance has revoked some.
    gathering = _gathered_in_one_batch(first, {s.id for s in gapped})
    beats = _stalled_until_revoked(first)
    stop = threading.Event()
    threads = [threading.Thread(target=first.run, args=(stop,), daemon=True)]
    threads[0].start()

    def caught_up(seqs: dict[str, int]) -> bool:
        return all(applied(redis_client, "surface", sid) == seq for sid, seq in seqs.items())

    try:
        wait_for(lambda: caught_up({s.id: len(s) - 1 for s in gapped}), what="sessions applied")
        for s in gapped:
            redis_client.delete(*first.projection.all_keys(s.id))  # Redis lost them
        nexts = [s.append("turn/start", {"turn": 3}) for s in gapped]
        gathering.set()  # every record of theirs read so far is applied: only these are next
        publish(topics, [(s.id, e.to_json()) for s, e in zip(gapped, nexts, strict=True)])
        wait_for(lambda: beats.count >= 1, what="the first projector's rebuild under way")
        second = build_runtime("surface", topics, redis_settings, settings)
        threads.append(threading.Thread(target=second.run, args=(stop,), daemon=True))
        threads[1].start()
        wait_for(
            lambda: (
                first.stats["partitions_revoked"] >= 1
                and first.loop._paused is None
                and caught_up({s.id: e.seq for s, e in zip(gapped, nexts, strict=True)})
            ),
            timeout_s=120,
            what="partitions moved, the rebuilds done by one owner or the other",
            explain=lambda: f"first {dict(first.stats)}, second {dict(second.stats)}",
        )
        ends = [s.append("turn/end", {"turn": 3, "reason": {"kind": "completed"}}) for s in gapped]
        publish(topics, [(s.id, e.to_json()) for s, e in zip(gapped, ends, strict=True)])
        wait_for(
            lambda: caught_up({s.id: e.seq for s, e in zip(gapped, ends, strict=True)}),
            timeout_s=60,
            what="the events after the rebalance applied",
        )
        # A commit sent while the rebalance's second round runs is refused (an old generation):
        # harmless, as the next one covers it. Every partition ends up committed to its end.
        group = f"{settings.group_prefix}-surface"
        wait_for(
            lambda: set(group_lag(topics, group, TEST_PARTITIONS).values()) == {0},
            timeout_s=30,
            what="the group committed to the end of every partition",
        )
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    stats = first.stats
    moved = stats["partitions_revoked"]
    assert 1 <= moved < TEST_PARTITIONS, dict(stats)
    # Revoked, never lost (assigned once), and the moved ones' rebuilds left to their owner.
    assert stats["partitions_assigned"] == TEST_PARTITIONS, dict(stats)
    assert stats["gap"] == TEST_PARTITIONS, dict(stats)  # all met in the one batch
    assert not beats.stall_timed_out, "no partition revoked within a minute of the rebuild's start"
    assert stats["rebuilds_abandoned"] >= 1, dict(stats)
    assert second.stats["partitions_assigned"] == moved, dict(second.stats)
    # What an operator sees of it: the metric counts each abandoned rebuild of either.
    abandoned = stats["rebuilds_abandoned"] + second.stats["rebuilds_abandoned"]
    assert _abandoned_metric() - abandoned_before == abandoned
    views = Views(redis_client, timeout_s=0)
    for s in gapped:
        view = views.surface(s.id)
        assert view.applied == len(s) - 1 and view.messages == s.derive_messages(), s.id


def _on(partition: int, prefix: str) -> str:
    """A session id starting ``prefix`` that lands on ``partition``."""
    ids = (f"{prefix}-{partition}-{i}" for i in itertools.count())
    return next(k for k in ids if partition_for(k, TEST_PARTITIONS) == partition)


def _abandoned_metric() -> float:
    sample = REGISTRY.get_sample_value(
        "dsh_projector_rebuilds_abandoned_total", {"projector": "surface"}
    )
    return sample or 0.0


def _rebuilt_metric(cause: str) -> float:
    labels = {"projector": "surface", "cause": cause}
    return REGISTRY.get_sample_value("dsh_projector_rebuilds_total", labels) or 0.0


def _short_poll_interval(topics: KafkaSettings) -> ProjectorSettings:
    """A projector whose group drops it after POLL_INTERVAL_MS without a poll."""
    return ProjectorSettings(
        group_prefix=f"g-{topics.topic_prefix}",
        projections="",
        poll_timeout_s=0.05,
        session_timeout_ms=POLL_INTERVAL_MS,
        max_poll_interval_ms=POLL_INTERVAL_MS,
    )


def test_a_projector_stopped_during_a_rebuild_stops_at_its_next_beat_and_loses_nothing(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """A stop asked for during a long rebuild waited for the whole scan (the pod's grace period
    ran out first). It now ends the rebuild at its next beat, commits nothing of that
    partition, and the next projector rebuilds the session and applies the event."""
    session = simple_session("rebuilt-stopped", turns=2)
    with _a_gap_rebuilt_slowly(topics, servers, redis_client, session, 0.5) as slow:
        first = slow.runtime
        slow.stop.set()
        at_stop = slow.beats.count
    beats = slow.beats.count
    assert beats <= at_stop + 1, f"{beats - at_stop} beats after the stop"  # of 8+ in the scan
    assert first.stats["rebuilds_abandoned"] == 1 and first.stats["rebuilt"] == 0
    assert applied(redis_client, "surface", session.id) == -1  # nothing written of it

    _the_next_projector_mends(topics, servers, redis_client, session)


def _gathered_in_one_batch(runtime: Runtime[Any], sessions: set[str]) -> threading.Event:
    """Once the returned event is set, the runtime's first batch holding a record of one of
    ``sessions`` waits until it holds one of each (a long fetch may hand the records of the
    partitions over one by one)."""
    loop = runtime.loop
    next_batch = loop._next_batch
    wanted = {sid.encode() for sid in sessions}
    armed = threading.Event()

    def gathered(consumer: Any, membership: Any, wait: bool) -> list[Any]:
        batch = next_batch(consumer, membership, wait)
        if not armed.is_set() or not wanted.intersection(m.key() for m in batch):
            return batch
        deadline = time.monotonic() + 30
        while not wanted.issubset(m.key() for m in batch) and time.monotonic() < deadline:
            batch += consumer.consume(100, 0.1)
        loop._next_batch = next_batch  # type: ignore[method-assign]
        return batch

    loop._next_batch = gathered  # type: ignore[method-assign]
    return armed


def _stalled_until_revoked(runtime: Runtime[Any], timeout_s: float = 60) -> Beats:
    """The first beat of the runtime's rebuilds serves the group, as each beat does, until a
    rebalance has revoked some of its partitions; the beats are counted."""
    beats = Beats()
    rebuilds = runtime.rebuilds
    rebuild, beat = rebuilds.rebuild, rebuilds.beat
    holds: list[tuple[int, Callable[[int], bool]]] = []  # (first partition, its hold)

    def holding(
        sessions: Mapping[int, set[str]],
        cause: str,
        hold: Callable[[int], bool] | None = None,
        rebuilt: Callable[[int, set[str]], None] | None = None,
    ) -> set[int]:
        if hold is not None and sessions:
            holds.append((next(iter(sessions)), hold))
        return rebuild(sessions, cause, hold, rebuilt)

    def stalled() -> None:
        beats.count += 1
        beat()
        if beats.count != 1 or not holds:
            return
        partition, hold = holds[-1]  # the first beat is of the first partition rebuilt
        deadline = time.monotonic() + timeout_s
        while not runtime.stats["partitions_revoked"]:
            if time.monotonic() > deadline:
                beats.stall_timed_out = True
                return
            hold(partition)  # polls the group, as the beat after this one does
            time.sleep(0.1)

    rebuilds.rebuild = holding  # type: ignore[method-assign]
    rebuilds.beat = stalled
    return beats


@dataclass
class Beats:
    count: int = 0  # of a rebuild's scan, one per thousand records
    stall_timed_out: bool = False  # _stalled_until_revoked met no rebalance


def _slowed(runtime: Runtime[Any], beat_s: float) -> Beats:
    """Each beat of the runtime's rebuilds counted, and taking ``beat_s``."""
    beats = Beats()

    def slow_beat() -> None:
        beats.count += 1
        time.sleep(beat_s)

    runtime.rebuilds.beat = slow_beat
    return beats


@dataclass
class SlowRebuild:
    runtime: Runtime[Any]
    stop: threading.Event
    start: dsh.Event  # the event that revealed the gap
    beats: Beats


@contextmanager
def _a_gap_rebuilt_slowly(
    topics: KafkaSettings,
    servers: Servers,
    redis_client: redis.Redis,
    session: dsh.Session,
    beat_s: float,
) -> Iterator[SlowRebuild]:
    """A running projector applies ``session`` behind 8,400 events of its partition; Redis
    loses it and its next event comes. Yields once the rebuild's scan is under way, each of
    its beats taking ``beat_s`` (one per thousand records); the projector stops after."""
    filler = _filler(partition_for(session.id, TEST_PARTITIONS))
    publish(topics, events_of(filler, session), 2_000)
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    runtime = build_runtime("surface", topics, redis_settings, _short_poll_interval(topics))
    with _running(runtime) as stop:
        wait_for(
            lambda: applied(redis_client, "surface", session.id) == len(session) - 1,
            what="the session applied",
        )
        redis_client.delete(*runtime.projection.all_keys(session.id))  # Redis lost it
        start = session.append("turn/start", {"turn": 3})
        slow = SlowRebuild(runtime, stop, start, _slowed(runtime, beat_s))
        publish(topics, [(session.id, start.to_json())])
        wait_for(lambda: slow.beats.count >= 1, what="the rebuild's scan under way")
        yield slow


def _filler(partition: int) -> dsh.Session:
    """A session of ``partition`` of 8,400 events, which a scan of it reads past (eight beats
    or more)."""
    ids = (f"filler-{i}" for i in itertools.count())
    filler_id = next(k for k in ids if partition_for(k, TEST_PARTITIONS) == partition)
    return simple_session(filler_id, turns=1_400)


@contextmanager
def _running(
    runtime: Runtime[Any], stop: threading.Event | None = None
) -> Iterator[threading.Event]:
    """The projector running on a thread of its own until the block ends; yields its stop."""
    stop = stop or threading.Event()
    thread = threading.Thread(target=runtime.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()


def _set_back_once_committed(
    topics: KafkaSettings,
    redis_client: redis.Redis,
    runtime: Runtime[Any],
    session: dsh.Session,
    earlier: int,
) -> None:
    """``runtime`` applies ``session`` to seq ``earlier``, then (published now) to its end and
    commits it; then its keys are set back to seq ``earlier``, while the projector's cache
    still believes it applied to its end."""
    partition = partition_for(session.id, TEST_PARTITIONS)
    events = events_of(session)
    group = runtime.settings.group_id("surface")
    wait_for(
        lambda: applied(redis_client, "surface", session.id) == earlier,
        what="the session applied up to its earlier seq",
    )
    dumps = {k: redis_client.dump(k) for k in runtime.projection.all_keys(session.id)}
    publish(topics, events[earlier + 1 :])
    # Committed only once settled: a batch whose replies were still unread when Redis fails
    # would go again over the set-back keys, and leave nothing to mend.
    wait_for(
        lambda: (
            applied(redis_client, "surface", session.id) == len(events) - 1
            and group_lag(topics, group, TEST_PARTITIONS).get(partition) == 0
        ),
        what="the session applied to its end and committed",
    )
    set_back(redis_client, dumps)


def test_a_stop_during_a_rebuild_commits_nothing_of_its_partition_in_the_batch_after(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """The batch read after the one whose gap is being rebuilt (two batches in hand) holds
    records of the same partition, of another session. A stop abandons the rebuild and leaves
    that partition uncommitted by the gap's batch; the batch after must not commit past the
    gap's record either, or the next projector never sees the gap and the session stays
    behind."""
    session = simple_session("rebuilt-stopped-after", turns=2)
    partition = partition_for(session.id, TEST_PARTITIONS)
    same = (
        k
        for k in (f"same-{i}" for i in itertools.count())
        if partition_for(k, TEST_PARTITIONS) == partition
    )
    filler_id, other_id = next(same), next(same)
    publish(topics, events_of(simple_session(filler_id, turns=1_400), session), 2_000)
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    settings = _short_poll_interval(topics)
    first = build_runtime("surface", topics, redis_settings, settings)
    with _running(first):
        wait_for(
            lambda: applied(redis_client, "surface", session.id) == len(session) - 1,
            what="the session applied",
        )
    # Two records a batch: the gap's record and one other in the first, the others' after.
    small = settings.model_copy(update={"batch_size": 2})
    second = build_runtime("surface", topics, redis_settings, small)
    beats = _slowed(second, 0.5)
    redis_client.delete(*second.projection.all_keys(session.id))  # Redis lost it
    start = session.append("turn/start", {"turn": 3})
    other = simple_session(other_id, turns=1)
    with _running(second) as stop:
        wait_for(
            lambda: second.stats["partitions_assigned"] == TEST_PARTITIONS,
            what="the partitions assigned",
        )
        publish(topics, [(session.id, start.to_json()), *events_of(other)])
        wait_for(lambda: beats.count >= 1, what="the rebuild's scan under way")
        stop.set()
    assert second.stats["rebuilds_abandoned"] == 1, dict(second.stats)

    _the_next_projector_mends(topics, servers, redis_client, session)


def test_a_stop_during_a_failovers_mend_waits_for_the_mend(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """A quiet session a failover set back behind what the projector applied is mended once a
    batch met the failure. A stop asked for during the mend's scan does not cut it short, as it
    would a gap's rebuild: the session's offsets are committed and it gets no other event, so
    nothing would show the projector that runs next that it is behind. The projector stops
    once the session is whole."""
    session = simple_session("mended-stopped", turns=4)
    partition = partition_for(session.id, TEST_PARTITIONS)
    events = events_of(session)
    earlier, last = len(events) // 2 - 1, len(events) - 1
    publish(topics, [*events_of(_filler(partition)), *events[: earlier + 1]], 2_000)
    settings = _short_poll_interval(topics)
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    runtime = build_runtime("surface", topics, redis_settings, settings)
    abandoned_before, mended_before = _abandoned_metric(), _rebuilt_metric("redis-failover")
    with _running(runtime) as stop:
        _set_back_once_committed(topics, redis_client, runtime, session, earlier)

        beats = _slowed(runtime, 0.1)
        slow_beat = runtime.rebuilds.beat
        at_stop: list[int] = []

        def stopping_beat() -> None:
            slow_beat()
            if not at_stop:  # the stop lands inside the mend's scan, whatever the machine's pace
                at_stop.append(beats.count)
                stop.set()

        runtime.rebuilds.beat = stopping_beat
        # The projector's link goes with the connections killed: its next batch fails.
        redis_client.client_kill_filter(_type="normal", skipme=True)
        publish(topics, events_of(simple_session("after-the-failover", turns=1)))
        wait_for(
            lambda: bool(at_stop),
            what="a stop asked for during the mend",
            explain=lambda: f"stats {dict(runtime.stats)}",
        )
    view = Views(redis_client, timeout_s=0).surface(session.id)
    assert view.applied == last, f"mended to {view.applied} of {last}, stats {dict(runtime.stats)}"
    assert view.messages == session.derive_messages()
    assert beats.count > at_stop[0], f"{beats.count} beats, the stop at {at_stop[0]}"
    assert runtime.stats["rebuilds_abandoned"] == 0, dict(runtime.stats)
    assert _abandoned_metric() == abandoned_before
    assert _rebuilt_metric("redis-failover") == mended_before + 1


def _the_next_projector_mends(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis, session: dsh.Session
) -> None:
    """A projector started now rebuilds the session, whose last event's gap the one before
    left, and applies that event: its view is the core's."""
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    runtime = build_runtime("surface", topics, redis_settings, _short_poll_interval(topics))
    last = len(session) - 1
    with _running(runtime):
        wait_for(
            lambda: applied(redis_client, "surface", session.id) == last,
            timeout_s=60,
            what="the next projector to rebuild the session and apply its event",
            explain=lambda: f"stats {dict(runtime.stats)}",
        )
    view = Views(redis_client, timeout_s=0).surface(session.id)
    assert view.applied == last and view.messages == session.derive_messages()


def test_a_failover_mend_abandoned_by_a_rebalance_is_finished_by_the_partitions_next_owner(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """A failover sets back a quiet session of every partition behind what the projector
    applied and committed. Its mend rebuilds them once a batch met the failure; a second
    projector joins the group meanwhile, and the partitions that move are abandoned by the
    first. Their new owner rebuilds those sessions, though none of them gets another event:
    the first handed the mend on in Redis. Every session ends up whole, each rebuilt once."""
    quiet = [simple_session(_on(p, "quiet"), turns=4) for p in range(TEST_PARTITIONS)]
    # 3,000 events a partition: the mend's scan of each takes three beats or more.
    fillers = [simple_session(_on(p, "filler"), turns=500) for p in range(TEST_PARTITIONS)]
    earlier = len(quiet[0]) // 2 - 1
    last = len(quiet[0]) - 1
    halves = [events_of(s) for s in quiet]
    publish(topics, [*events_of(*fillers), *(e for h in halves for e in h[: earlier + 1])], 2_000)
    settings = _short_poll_interval(topics)
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    first = build_runtime("surface", topics, redis_settings, settings)
    group = f"{settings.group_prefix}-surface"
    mended_before = _rebuilt_metric("redis-failover")

    def caught_up(seq: int) -> bool:
        return all(applied(redis_client, "surface", s.id) == seq for s in quiet)

    stop = threading.Event()
    threads = [threading.Thread(target=first.run, args=(stop,), daemon=True)]
    threads[0].start()
    second: Runtime[Any] | None = None
    try:
        wait_for(lambda: caught_up(earlier), timeout_s=60, what="the sessions at their seq M")
        keys = [k for s in quiet for k in first.projection.all_keys(s.id)]
        dumps = {k: redis_client.dump(k) for k in keys}  # None: no such key at seq M
        publish(topics, [e for h in halves for e in h[earlier + 1 :]])
        # Committed only once settled: a batch whose replies were still unread when Redis
        # fails would go again over the set-back keys, and leave nothing to mend.
        wait_for(
            lambda: (
                caught_up(last) and set(group_lag(topics, group, TEST_PARTITIONS).values()) == {0}
            ),
            what="the sessions applied to their end and committed",
        )
        set_back(redis_client, dumps)  # the cache still believes them applied to their end
        assert caught_up(earlier), "not set back to seq M"

        beats = _stalled_until_revoked(first)  # the mend's first beat waits for a rebalance
        # The projector's link goes with the connections killed: its next batch fails.
        redis_client.client_kill_filter(_type="normal", skipme=True)
        publish(topics, events_of(simple_session("after-the-failover", turns=1)))
        wait_for(
            lambda: beats.count >= 1,
            what="the first projector's mend under way",
            explain=lambda: f"stats {dict(first.stats)}",
        )
        second = build_runtime("surface", topics, redis_settings, settings)
        threads.append(threading.Thread(target=second.run, args=(stop,), daemon=True))
        threads[1].start()
        joined = second
        wait_for(
            lambda: (
                first.stats["partitions_revoked"] >= 1
                and first.loop._paused is None
                and caught_up(last)
            ),
            timeout_s=120,
            what="partitions moved, every quiet session mended by one owner or the other",
            explain=lambda: f"first {dict(first.stats)}, second {dict(joined.stats)}",
        )
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert second is not None
    assert not beats.stall_timed_out, "no partition revoked within a minute of the mend's start"
    moved = first.stats["partitions_revoked"]
    assert 1 <= moved < TEST_PARTITIONS, dict(first.stats)
    assert second.stats["partitions_assigned"] == moved, dict(second.stats)
    # The first mended the sessions of the partitions it kept, the second those whose mend
    # the first abandoned: each once, and neither met a gap (no event of theirs came).
    assert first.stats["rebuilds_abandoned"] >= 1, dict(first.stats)
    assert second.stats["rebuilt"] >= 1, dict(second.stats)
    rebuilt = first.stats["rebuilt"] + second.stats["rebuilt"]
    assert rebuilt == TEST_PARTITIONS, (dict(first.stats), dict(second.stats))
    assert first.stats["gap"] == second.stats["gap"] == 0
    assert _rebuilt_metric("redis-failover") == mended_before + TEST_PARTITIONS
    # Nothing is left handed on.
    mend = first.projection.keys.mend
    assert not any(redis_client.exists(mend("surface", p)) for p in range(TEST_PARTITIONS))
    views = Views(redis_client, timeout_s=0)
    for s in quiet:
        view = views.surface(s.id)
        assert view.applied == last and view.messages == s.derive_messages(), s.id


class _Died(BaseException):
    """What ends a projector's thread in the middle of its work, from a beat of its rebuild."""


def test_a_failover_mend_cut_short_by_the_projectors_death_is_finished_by_the_next_one(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """A quiet session a failover set back is being mended when the projector's thread ends at
    the mend's first beat (an exception no one catches; ``Runtime.run`` still closes its
    consumer on the way out, so this is no SIGKILL). What the process knew of the session is
    gone with it, and the session gets no other event: the projector that takes its
    partitions next rebuilds it from what the first handed on in Redis."""
    session = simple_session("mended-by-the-next", turns=4)
    mended_before = _rebuilt_metric("redis-failover")
    _a_mend_handed_on(topics, servers, redis_client, session)

    second = _next_runtime(topics, servers)
    with _running(second):
        _mended_by(second, redis_client, session)
    assert second.stats["rebuilt"] == 1 and second.stats["gap"] == 0, dict(second.stats)
    assert _rebuilt_metric("redis-failover") == mended_before + 1


def test_a_stop_during_a_take_over_of_a_mend_leaves_it_handed_on(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis
) -> None:
    """Unlike a failover's mend, its take-over by the partition's next owner is cut short by a
    stop, at the scan's next beat: the projector stops without scanning the partition to its
    end, and the mend stays handed on in Redis, for whoever is assigned the partition next."""
    session = simple_session("taken-over-stopped", turns=4)
    partition = _a_mend_handed_on(topics, servers, redis_client, session)

    second = _next_runtime(topics, servers)
    mend = second.projection.keys.mend("surface", partition)
    beats = _slowed(second, 0.1)
    slow_beat = second.rebuilds.beat
    at_stop: list[int] = []
    stop = threading.Event()

    def stopping_beat() -> None:
        slow_beat()
        if not at_stop:  # the stop lands inside the take-over's scan
            at_stop.append(beats.count)
            stop.set()

    second.rebuilds.beat = stopping_beat  # before it runs: the take-over comes at once
    with _running(second, stop):
        wait_for(
            lambda: bool(at_stop),
            what="a stop asked for during the take-over",
            explain=lambda: f"stats {dict(second.stats)}",
        )
    assert beats.count == at_stop[0], f"{beats.count} beats, the stop at {at_stop[0]}"  # of 3+
    assert second.stats["rebuilds_abandoned"] == 1, dict(second.stats)
    assert second.stats["rebuilt"] == 0, dict(second.stats)
    assert redis_client.smembers(mend) == {session.id.encode()}
    assert applied(redis_client, "surface", session.id) < len(session) - 1

    third = _next_runtime(topics, servers)
    with _running(third):
        _mended_by(third, redis_client, session)
    assert third.stats["rebuilt"] == 1 and third.stats["gap"] == 0, dict(third.stats)


def _a_mend_handed_on(
    topics: KafkaSettings, servers: Servers, redis_client: redis.Redis, session: dsh.Session
) -> int:
    """A projector applies ``session`` (of 3,000 other records in its partition) and commits
    it; Redis then sets it back to half-way, and fails for the projector's next batch. The
    projector's mend writes the session down in Redis, and the thread ends at the mend's first
    beat: nothing mended. Returns the session's partition."""
    partition = partition_for(session.id, TEST_PARTITIONS)
    events = events_of(session)
    earlier = len(events) // 2 - 1
    filler = simple_session(_on(partition, "filler"), turns=500)  # the scan beats thrice
    publish(topics, [*events_of(filler), *events[: earlier + 1]], 2_000)
    settings = _short_poll_interval(topics)
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    first = build_runtime("surface", topics, redis_settings, settings)
    beats = Beats()

    def dying_beat() -> None:
        beats.count += 1
        raise _Died

    def run_until_it_dies() -> None:
        with contextlib.suppress(_Died):
            first.run(stop)

    stop = threading.Event()  # only if the test fails before the death

    thread = threading.Thread(target=run_until_it_dies, daemon=True)
    thread.start()
    try:
        _set_back_once_committed(topics, redis_client, first, session, earlier)
        first.rebuilds.beat = dying_beat
        # The projector's link goes with the connections killed: its next batch fails.
        redis_client.client_kill_filter(_type="normal", skipme=True)
        publish(topics, events_of(simple_session("after-the-failover", turns=1)))
        wait_for(
            lambda: not thread.is_alive(),
            timeout_s=60,
            what="the first projector's thread ended at its mend's first beat",
            explain=lambda: f"stats {dict(first.stats)}",
        )
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    assert beats.count == 1 and first.stats["rebuilt"] == 0, dict(first.stats)
    assert applied(redis_client, "surface", session.id) == earlier  # nothing mended yet
    mend = first.projection.keys.mend("surface", partition)
    assert redis_client.smembers(mend) == {session.id.encode()}
    return partition


def _next_runtime(topics: KafkaSettings, servers: Servers) -> Runtime[Any]:
    redis_settings = RedisSettings(url=SecretStr(servers.redis_url))
    return build_runtime("surface", topics, redis_settings, _short_poll_interval(topics))


def _mended_by(runtime: Runtime[Any], redis_client: redis.Redis, session: dsh.Session) -> None:
    """Once ``runtime`` runs: it rebuilds ``session`` to its end and clears its handed-on mend."""
    last = len(session) - 1
    wait_for(
        lambda: applied(redis_client, "surface", session.id) == last,
        timeout_s=60,
        what="the next projector to mend the session",
        explain=lambda: f"stats {dict(runtime.stats)}",
    )
    mend = runtime.projection.keys.mend("surface", partition_for(session.id, TEST_PARTITIONS))
    wait_for(lambda: not redis_client.exists(mend), what="the handed-on mend cleared")
    view = Views(redis_client, timeout_s=0).surface(session.id)
    assert view.applied == last and view.messages == session.derive_messages()
