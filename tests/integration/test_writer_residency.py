"""A writer with a tiny memory budget (one resident session per partition) serves many sessions
appended round-robin exactly as one holding them all: every session is evicted and restored
again and again, from its snapshot or (too large to snapshot) from its events, and still gets
contiguous seqs, its expected_seq checked, a retried request answered with its original
events, a remembered rejection repeated, and nothing lost, also after a restart."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import dsh
from producers import ConflictError, SessionClient, draft
from producers.errors import InvariantsModeError
from producers.writer import metrics, restore
from schemas import WriterSnapshot, decode_snapshot
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    PARTITIONS,
    events_end_offsets,
    running_writer,
    writer_settings,
)
from tests.support.builders import assistant, user

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


def test_a_restore_builds_only_the_sessions_its_budget_keeps_and_reloads_the_rest(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer taking partitions over decodes the snapshots of the sessions its budget keeps
    (one per partition here), not of every session: the others are stubs from the start, and
    come back on demand with their events, answered requests and mode (one without
    invariants) intact."""
    run = uuid.uuid4().hex[:6]
    sids = [f"cold-{run}-{i}" for i in range(SESSIONS)]
    bare = sids[0]
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
            client.append_many(bare, outside, invariants=False)
            for sid in sids[1:]:
                client.append(sid, "user/message", user(f"{sid}-0"), surface_op="append")
            for sid in sids:  # each session's last event is in its latest snapshot
                client.append(
                    sid, "user/message", user(f"{sid}-1"), surface_op="append", request_id=sid
                )
        monkeypatch.setattr(restore, "decode_snapshot", counted)
        with running_writer(topics, settings) as second:
            resident = {s for state in second.partitions.values() for s in state.sessions}
            stubs = {s for state in second.partitions.values() for s in state.residency.evicted}
            ours = set(sids)
            assert len(resident & ours) <= PARTITIONS
            assert ours <= resident | stubs
            assert len(decoded) == len(set(decoded)) == len(resident & ours)
            for sid in sids:  # a retry is answered from the reloaded session
                again = client.append(
                    sid, "user/message", user(f"{sid}-1"), surface_op="append", request_id=sid
                )
                assert again.seq == 1
            with pytest.raises(InvariantsModeError):
                client.append_many(bare, outside, invariants=True)
            assert client.read(bare).invariants is False
            assert client.append_many(bare, outside)[0].seq == 2
