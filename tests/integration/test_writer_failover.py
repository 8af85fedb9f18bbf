"""Two writer processes (`python -m cli writer`) share the partitions. One is SIGKILLed
under load: the other takes over from the log, and no acknowledged append is lost or
duplicated. One is SIGSTOPped mid-batch: once resumed after losing its partitions, it cannot
publish: its offsets go with group metadata that is no longer valid (the writer notices the
lost membership itself, or the coordinator refuses the stale member), so it aborts."""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from deploy.local.processes import free_ports
from producers import AppendTimeoutError, SessionClient
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    PARTITIONS,
    WriterProcess,
    split,
    stop_mid_batch,
)
from tests.support.builders import user
from tests.support.waiting import wait_for

ALL = list(range(PARTITIONS))


def _settings(**extra: object) -> dict[str, object]:
    return {
        "group_id": f"dsh-writer-{uuid.uuid4().hex[:8]}",
        "metrics_port": 0,
        "session_timeout_ms": 6000,
        "transaction_timeout_ms": 6000,
        "snapshot_every": 10,
        **extra,
    }


def _sessions(per_partition: int) -> list[str]:
    by_partition: dict[int, list[str]] = {p: [] for p in ALL}
    i = 0
    while any(len(v) < per_partition for v in by_partition.values()):
        sid = f"s-{uuid.uuid4().hex[:6]}-{i}"
        bucket = by_partition[partition_for(sid, PARTITIONS)]
        if len(bucket) < per_partition:
            bucket.append(sid)
        i += 1
    return [sid for p in ALL for sid in by_partition[p]]


def _check_log(client: SessionClient, acked: dict[str, list[tuple[int, str]]]) -> None:
    for sid, acks in acked.items():
        events = client.read_log(sid).events()
        assert [e.seq for e in events] == list(range(len(events))), sid
        ids = [e.data["id"] for e in events]
        assert len(ids) == len(set(ids)), f"{sid}: an append was published twice"
        assert sorted(acks) == sorted((e.seq, e.data["id"]) for e in events), sid


def test_sigkill_one_writer_mid_load_loses_and_duplicates_nothing(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    settings = _settings()
    (metrics_port,) = free_ports(1)
    a = WriterProcess(topics, tmp_path / "a.log", **settings)
    b = WriterProcess(topics, tmp_path / "b.log", **{**settings, "metrics_port": metrics_port})
    stop = threading.Event()
    acked: dict[str, list[tuple[int, str]]] = {}
    retried = [0]
    try:
        wait_for(lambda: split(a, b), 60, "two writers splitting the partitions")
        victim_partitions = a.owned() or []
        with SessionClient(settings=topics, timeout=3) as client:

            def load(sid: str) -> None:
                i = 0
                while not stop.is_set():
                    rid = f"{sid}-{i}"
                    while True:  # retry with the same request id until answered
                        try:
                            ev = client.append(
                                sid, "user/message", user(rid), surface_op="append", request_id=rid
                            )
                            break
                        except AppendTimeoutError:
                            retried[0] += 1
                    acked[sid].append((ev.seq, rid))
                    i += 1

            sessions = _sessions(per_partition=2)
            for sid in sessions:
                acked[sid] = []
            threads = [threading.Thread(target=load, args=(sid,)) for sid in sessions]
            for t in threads:
                t.start()
            wait_for(lambda: all(len(v) >= 10 for v in acked.values()), 60, "load running")
            a.signal(signal.SIGKILL)
            at_kill = {sid: len(v) for sid, v in acked.items()}
            wait_for(lambda: b.owned() == ALL, 60, "the survivor owning every partition")
            wait_for(
                lambda: all(len(acked[s]) >= at_kill[s] + 10 for s in sessions),
                60,
                "appends to every session after the takeover",
            )
            stop.set()
            for t in threads:
                t.join(60)
            _check_log(client, acked)
        log = b.log()
        assert all(f"partition {p} restored" in log for p in victim_partitions)
        assert retried[0] > 0  # the kill really hit appends in flight
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            exposition = r.read().decode()
        assert f"dsh_writer_partitions_owned {float(PARTITIONS)}" in exposition
        assert 'dsh_writer_appends_total{result="committed",type="user/message"}' in exposition
        assert "dsh_writer_restore_seconds_count" in exposition
    finally:
        stop.set()
        a.close()
        b.close()


def test_a_paused_writer_that_lost_its_partitions_cannot_publish(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    settings = _settings()
    a = WriterProcess(
        topics, tmp_path / "a.log", failpoint="stop-before-produce:zombie-1", **settings
    )
    b = WriterProcess(topics, tmp_path / "b.log", **settings)
    try:
        wait_for(lambda: split(a, b), 60, "two writers splitting the partitions")
        with SessionClient(settings=topics, timeout=60) as client:
            # A takes this command into a transaction, then stops before producing it.
            sid, held = stop_mid_batch(client, a, "zombie-1")
            wait_for(lambda: b.owned() == ALL, 60, "the other writer taking over")
            # B answers the same command from the commands log, A's offsets never committed.
            assert held.result(60).seq == 3
            assert client.append(sid, "user/message", user("after"), surface_op="append").seq == 4

            a.signal(signal.SIGCONT)
            wait_for(lambda: "transaction aborted" in a.log(), 30, "the zombie's abort")
            time.sleep(1)  # anything it could still publish would be committed by now
            events = client.read_log(sid).events()
            assert [e.data["id"] for e in events] == [
                "warm-0",
                "warm-1",
                "warm-2",
                "zombie-1",
                "after",
            ]
            # And after rejoining the group, both writers serve appends correctly again.
            wait_for(lambda: split(a, b), 60, "the partitions split again")
            assert client.append(sid, "user/message", user("later"), surface_op="append").seq == 5
        assert "failpoint: resumed" in a.log()
    finally:
        a.close()
        b.close()
