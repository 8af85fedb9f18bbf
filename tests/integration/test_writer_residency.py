"""A writer with a tiny memory budget (one resident session per partition) serves many sessions
appended round-robin exactly as one holding them all: every session is evicted and restored
again and again, from its snapshot or (too large to snapshot) from its events, and still gets
contiguous seqs, its expected_seq checked, a retried request answered with its original
events, a remembered rejection repeated, and nothing lost, also after a restart."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

import dsh
from producers import ConflictError, SessionClient, draft
from producers.errors import InvariantsModeError
from producers.writer import metrics, restore
from producers.writer.restore import CHECKPOINT_KEY, CheckpointMark, checkpoint_mark
from schemas import WriterSnapshot, decode_snapshot
from servicekit import kafka_clients
from servicekit.partition_reader import high_watermark, read_partitions
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    PARTITIONS,
    events_end_offsets,
    running_writer,
    writer_settings,
)
from tests.support.builders import assistant, user
from tests.support.waiting import wait_for

SESSIONS = 10
ROUNDS = 4


def _count(counter: object, *labels: str) -> float:
    return sum(
        s.value
        for m in counter.collect()  # type: ignore[attr-defined]
        for s in m.samples
        if s.name.endswith("_total") and all(v in s.labels.values() for v in labels)
    )


@pytest.mark.parametrize(
    ("max_snapshot_bytes", "source"),
    [(900 * 1024, "snapshot"), (1, "events")],
    ids=["from-snapshots", "from-events"],
)
def test_sessions_evicted_and_restored_on_demand_keep_every_guarantee(
    topics: KafkaSettings, max_snapshot_bytes: int, source: str
) -> None:
    run = uuid.uuid4().hex[:6]
    sids = [f"lru-{run}-{i}" for i in range(SESSIONS)]
    settings = writer_settings(
        max_resident_sessions=PARTITIONS,
        snapshot_every=1000,
        max_snapshot_bytes=max_snapshot_bytes,
    )
    evicted, reloaded = _count(metrics.EVICTIONS), _count(metrics.RELOADS, source)
    with SessionClient(settings=topics, timeout=30) as client:
        with running_writer(topics, settings) as writer:
            for r in range(ROUNDS):
                for sid in sids:
                    ev = client.append(
                        sid,
                        "user/message",
                        user(f"{sid}-{r}"),
                        surface_op="append",
                        expected_seq=r,
                        request_id=f"{sid}-r{r}",
                    )
                    assert ev.seq == r
            # Every session left memory, and came back, many times.
            assert _count(metrics.EVICTIONS) - evicted >= SESSIONS * (ROUNDS - 1)
            assert _count(metrics.RELOADS, source) - reloaded >= SESSIONS
            for state in writer.partitions.values():
                assert len(state.sessions) <= 1
            stale = sids[0]

            def late() -> dsh.Event:
                return client.append(
                    stale, "user/message", user("late"), surface_op="append", expected_seq=1,
                    request_id="stale",
                )  # fmt: skip

            with pytest.raises(ConflictError) as conflict:
                late()
            for sid in sids[1:]:  # the stale session is evicted again
                client.append(sid, "user/message", user("more"), surface_op="append")
            before = events_end_offsets(topics)
            again = client.append(
                sids[0],
                "user/message",
                user(f"{sids[0]}-0"),
                surface_op="append",
                request_id=f"{sids[0]}-r0",
            )
            assert again.seq == 0
            with pytest.raises(ConflictError) as repeated:
                late()
            assert repeated.value.message == conflict.value.message
            assert events_end_offsets(topics) == before  # retries appended nothing
            logs = {sid: client.read(sid) for sid in sids}
        with running_writer(topics, settings):
            for sid in sids:
                events = client.read(sid).events()
                assert [e.to_json() for e in events] == [e.to_json() for e in logs[sid].events()]
                assert [e.seq for e in events] == list(range(len(events)))
                ids = [e.data["id"] for e in events[:ROUNDS]]
                assert ids == [f"{sid}-{r}" for r in range(ROUNDS)]
                assert isinstance(events[0], dsh.Event)


def _two_events_each(client: SessionClient, sids: list[str], outside: list[Any]) -> None:
    """Seqs 0 and 1 of each session; the first is without invariants, the others' second
    event has its session id as request id."""
    client.append_many(sids[0], outside, invariants=False)
    for sid in sids[1:]:
        client.append(sid, "user/message", user(f"{sid}-0"), surface_op="append")
    for sid in sids:
        client.append(sid, "user/message", user(f"{sid}-1"), surface_op="append", request_id=sid)


def _held_within_the_budget(writer: Any, sids: list[str]) -> set[str]:
    """The sessions of ``sids`` the writer holds in memory: at most one per partition, the
    rest evicted to stubs. Returns those held."""
    resident = {s for state in writer.partitions.values() for s in state.sessions}
    stubs = {s for state in writer.partitions.values() for s in state.residency.evicted}
    ours = set(sids)
    assert len(resident & ours) <= PARTITIONS
    assert ours <= resident | stubs
    return resident & ours


def _reloaded_intact(client: SessionClient, sids: list[str], outside: list[Any]) -> None:
    """Each session comes back on demand: a retry is answered from it, and the first keeps
    its mode (no invariants)."""
    for sid in sids:
        again = client.append(
            sid, "user/message", user(f"{sid}-1"), surface_op="append", request_id=sid
        )
        assert again.seq == 1
    with pytest.raises(InvariantsModeError):
        client.append_many(sids[0], outside, invariants=True)
    assert client.read(sids[0]).invariants is False
    assert client.append_many(sids[0], outside)[0].seq == 2


def test_a_restore_builds_only_the_sessions_its_budget_keeps_and_reloads_the_rest(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer taking partitions over decodes the snapshots of the sessions its budget keeps
    (one per partition here), not of every session: the others are stubs from the start, and
    come back on demand with their events, answered requests and mode (one without
    invariants) intact."""
    run = uuid.uuid4().hex[:6]
    sids = [f"cold-{run}-{i}" for i in range(SESSIONS)]
    settings = writer_settings(
        max_resident_sessions=PARTITIONS, snapshot_every=1, checkpoint_every=1
    )
    outside = [draft("assistant/message", assistant(mid="a0"), surface_op="append")]
    decoded: list[str] = []

    def counted(value: bytes, **kw: Any) -> WriterSnapshot:
        snapshot = decode_snapshot(value, **kw)
        if snapshot.session_id.startswith(f"cold-{run}"):
            decoded.append(snapshot.session_id)
        return snapshot

    with SessionClient(settings=topics, timeout=30) as client:
        with running_writer(topics, settings):
            # Each session's last event is in its latest snapshot.
            _two_events_each(client, sids, outside)
        monkeypatch.setattr(restore, "decode_snapshot", counted)
        with running_writer(topics, settings) as second:
            resident = _held_within_the_budget(second, sids)
            assert len(decoded) == len(set(decoded)) == len(resident)
            _reloaded_intact(client, sids, outside)


def test_sessions_restored_from_their_events_alone_are_held_within_the_budget(
    topics: KafkaSettings,
) -> None:
    """With no snapshot (none written here; a restore that falls back to the events topic
    ignores them), every session has events after its snapshot: they were all built and kept
    in memory, whatever the budget. Past it they are now evicted to their events, and come
    back on demand with their events, answered requests and mode intact."""
    run = uuid.uuid4().hex[:6]
    sids = [f"tail-{run}-{i}" for i in range(SESSIONS)]
    settings = writer_settings(
        max_resident_sessions=PARTITIONS, snapshot_every=0, checkpoint_every=0
    )
    outside = [draft("assistant/message", assistant(mid="a0"), surface_op="append")]
    with SessionClient(settings=topics, timeout=30) as client:
        with running_writer(topics, settings.model_copy(update={"max_resident_sessions": 0})):
            _two_events_each(client, sids, outside)
        with running_writer(topics, settings) as second:
            _held_within_the_budget(second, sids)
            ours = set(sids)
            assert all(sid in state.dirty for state in second.partitions.values()
                       for sid in state.residency.evicted if sid in ours)  # fmt: skip
            _reloaded_intact(client, sids, outside)
            for sid in sids[1:]:
                assert (
                    client.append(
                        sid, "user/message", user("u2"), surface_op="append", expected_seq=2
                    ).seq
                    == 2
                )


def test_a_session_whose_tail_the_budget_evicts_is_not_also_built_from_its_held_snapshot(
    topics: KafkaSettings,
) -> None:
    """Each session has a snapshot (seq 0) and a tail (seq 1). The restore holds the most
    recent snapshot of each partition but keeps the tail of the session used last: the
    session with the held snapshot and an evicted tail must not be built from its snapshot
    alone (it would serve seq 1 again)."""
    run = uuid.uuid4().hex[:6]
    sids = [f"ht-{run}-{i}" for i in range(SESSIONS)]
    base = writer_settings(snapshot_every=1, checkpoint_every=0)
    with SessionClient(settings=topics, timeout=30) as client:
        with running_writer(topics, base):  # snapshots in order s0 .. s9
            for sid in sids:
                client.append(sid, "user/message", user(f"{sid}-0"), surface_op="append")
        no_snapshots = base.model_copy(update={"snapshot_every": 0})
        with running_writer(topics, no_snapshots):  # tails in order s9 .. s0
            for sid in reversed(sids):
                client.append(sid, "user/message", user(f"{sid}-1"), surface_op="append")
        budget = base.model_copy(update={"max_resident_sessions": PARTITIONS, "snapshot_every": 0})
        with running_writer(topics, budget) as third:
            both = {s for st in third.partitions.values()
                    for s in set(st.sessions) & set(st.residency.evicted)}  # fmt: skip
            seqs = {
                sid: client.append(sid, "user/message", user("u2"), surface_op="append").seq
                for sid in sids
            }
            assert seqs == dict.fromkeys(sids, 2), (both, seqs)


def _evicted_snapshotted() -> float:
    value = REGISTRY.get_sample_value("dsh_writer_evicted_sessions_snapshotted_total")
    return value or 0.0


def _checkpoint_marks(kafka: KafkaSettings) -> dict[int, CheckpointMark]:
    """The latest committed checkpoint of each snapshots partition that has one, read as a
    restore reads it."""
    topic = kafka.topic("snapshots")
    reader = kafka_clients.reader(kafka, topics=(topic,))
    probe = kafka_clients.reader(kafka, "read_uncommitted", topics=(topic,))
    marks: dict[int, CheckpointMark] = {}
    try:
        for p in range(PARTITIONS):
            ranges: dict[int, tuple[int | None, int | None]] = {
                p: (None, high_watermark(probe, topic, p))
            }
            for message in read_partitions(reader, topic, ranges, 30):
                if message.key() == CHECKPOINT_KEY:
                    marks[p] = checkpoint_mark(decode_snapshot(message.value() or b""))
    finally:
        reader.close()
        probe.close()
    return marks


def test_sessions_a_restore_evicts_with_events_no_snapshot_covers_are_snapshotted_when_idle(
    topics: KafkaSettings,
) -> None:
    """Sessions with events no snapshot covers, evicted by a restore past its budget, would be
    named by every later checkpoint with where those events start for as long as they stay
    quiet, and every restore would read the events topic from there. An idle writer takes
    them out of the topics a few per idle transaction, within its budget, snapshots them and
    writes a checkpoint past their events: the next restore reads from there, and each session
    goes on from its snapshot at the right seq, with its answered requests and mode."""
    run = uuid.uuid4().hex[:6]
    sids = [f"quiet-{run}-{i}" for i in range(SESSIONS)]
    settings = writer_settings(
        max_resident_sessions=PARTITIONS, snapshot_every=0, checkpoint_every=1000
    )
    outside = [draft("assistant/message", assistant(mid="a0"), surface_op="append")]
    by_partition: dict[int, list[str]] = {}
    for sid in sids:
        by_partition.setdefault(partition_for(sid, PARTITIONS), []).append(sid)
    # One resident session per partition: the others of a partition are evicted dirty.
    crowded = {p for p, ours in by_partition.items() if len(ours) > 1}
    evicted = sum(len(by_partition[p]) - 1 for p in crowded)
    assert crowded and evicted >= SESSIONS - PARTITIONS
    snapshotted = _evicted_snapshotted()
    with SessionClient(settings=topics, timeout=30) as client:
        unbounded = {"max_resident_sessions": 0, "checkpoint_every": 0}
        with running_writer(topics, settings.model_copy(update=unbounded)):
            _two_events_each(client, sids, outside)
        ends = events_end_offsets(topics)  # every event of the sessions is below
        with running_writer(topics, settings) as second:

            def past_their_events() -> bool:
                marks = _checkpoint_marks(topics)
                return all(p in marks and marks[p].start >= ends[p] for p in crowded)

            wait_for(past_their_events, 30, "checkpoints past the evicted sessions' events",
                     lambda: repr(_checkpoint_marks(topics)))  # fmt: skip
            assert _evicted_snapshotted() - snapshotted >= evicted
            for state in second.partitions.values():
                assert len(state.sessions) <= 1  # never made resident to be snapshotted
        marks = _checkpoint_marks(topics)
        assert all(not marks[p].unsnapshotted for p in crowded)
        with running_writer(topics, settings) as third:
            for p in crowded:
                assert third.partitions[p].restored_from >= ends[p]
            _reloaded_intact(client, sids, outside)
            for sid in sids[1:]:
                ev = client.append(sid, "user/message", user("u2"), surface_op="append",
                                   expected_seq=2)  # fmt: skip
                assert ev.seq == 2
