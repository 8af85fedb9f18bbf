"""The writer and SessionClient against the real broker: the Kafka path gives exactly what the
in-process core gives, every rejection arrives typed with nothing published, and a retried
request id appends once (also across a writer restart)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import REGISTRY

import dsh
import producers.writer.restore as restore_module
import producers.writer.snapshots as snapshots_module
from producers import (
    AppendTimeoutError,
    ConflictError,
    InvariantsModeError,
    MalformedCommandError,
    PayloadTooLargeError,
    ReplyUndecodableError,
    SessionClient,
    WrongPartitionError,
    draft,
)
from producers.writer import Writer
from producers.writer.recovery import unfenced
from producers.writer.wire import committed_reply
from schemas import (
    AppendCommand,
    AppendReply,
    EventRecord,
    WriterSnapshot,
    decode_reply,
    decode_snapshot,
    encode_command,
    encode_event,
    encode_reply,
)
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    PARTITIONS,
    events_end_offsets,
    multi_turn_script,
    run_script_in_process,
    running_writer,
    without_time,
    writer_settings,
)
from tests.support.builders import assistant, user
from tests.support.waiting import wait_for


@pytest.fixture
def writer(topics: KafkaSettings) -> Iterator[Writer]:
    settings = writer_settings(max_event_bytes=4_000, max_command_bytes=12_000)
    with running_writer(topics, settings) as w:
        yield w


@pytest.fixture
def client(topics: KafkaSettings, writer: Writer) -> Iterator[SessionClient]:
    with SessionClient(settings=topics, timeout=20) as c:
        yield c


def test_scripted_session_through_the_client_equals_the_in_process_core(
    client: SessionClient,
) -> None:
    sid = f"roundtrip-{uuid.uuid4().hex[:8]}"
    acked: list[dsh.Event] = []

    def append(type_: str, data: Any, op: Any, sources: Any) -> dsh.Event:
        ev = client.append(sid, type_, data, surface_op=op, source_event_seqs=sources)
        acked.append(ev)
        return ev

    def append_many(drafts: list[dict[str, Any]]) -> list[dsh.Event]:
        events = client.append_many(sid, drafts)
        acked.extend(events)
        return events

    multi_turn_script(append, append_many)
    local = dsh.Session.create(sid)
    run_script_in_process(local)

    assert without_time(acked) == without_time(local.events())
    assert [e.seq for e in acked] == list(range(len(local)))
    remote = client.read(sid)
    assert remote.events() == tuple(acked)  # times too: the log is what was acknowledged
    assert remote.surface.nodes == local.surface.nodes
    assert remote.surface.replace_generation == local.surface.replace_generation == 1
    assert remote.surface.content_generation == local.surface.content_generation
    assert remote.derive_messages() == local.derive_messages()
    assert without_time(remote.transcript()) == without_time(local.transcript())


def _open_step(client: SessionClient, sid: str) -> None:
    client.append(sid, "turn/start", {"turn": 1})
    client.append(sid, "user/message", user("u1"), surface_op="append")
    client.append(sid, "step/start", {"turn": 1, "step": 1})
    client.append(sid, "assistant/message", assistant(1, 1, "a-1-1", "hello"), surface_op="append")


REJECTIONS: list[tuple[str, dict[str, Any], type[dsh.SessionError], str]] = [
    (
        "surface: replace endpoint not on the surface",
        {
            "type": "user/message",
            "data": user("x"),
            "surfaceOp": dsh.Replace(0, 1).to_json(),
            "sourceEventSeqs": [0, 1],
        },
        dsh.SurfaceError,
        "",
    ),
    (
        "provenance: replace without citing a hidden node",
        {
            "type": "user/message",
            "data": user("x"),
            "surfaceOp": dsh.Replace(1, 3).to_json(),
            "sourceEventSeqs": [1],
        },
        dsh.ProvenanceError,
        "",
    ),
    (
        "invariant: a second turn inside the open one",
        {"type": "turn/start", "data": {"turn": 2}},
        dsh.InvariantError,
        "",
    ),
    (
        "projection: a projection type without an interpreter",
        {"type": "image/offload", "data": {"seqs": [1]}},
        dsh.ProjectionError,
        "",
    ),
    ("envelope: a malformed type", {"type": "no-slash", "data": {}}, dsh.ValidationError, ""),
    (
        "size: one event above the writer's event limit",
        {"type": "user/message", "data": user("big", "x" * 5_000), "surfaceOp": "append"},
        PayloadTooLargeError,
        "EVENT_TOO_LARGE",
    ),
]


@pytest.mark.parametrize(
    ("draft_", "error", "code"),
    [pytest.param(d, e, c, id=name) for name, d, e, c in REJECTIONS],
)
def test_each_rejection_reaches_the_client_typed_and_publishes_nothing(
    topics: KafkaSettings,
    client: SessionClient,
    draft_: dict[str, Any],
    error: type[dsh.SessionError],
    code: str,
) -> None:
    sid = f"reject-{uuid.uuid4().hex[:8]}"
    _open_step(client, sid)
    local = dsh.Session.create(sid)
    local.append("turn/start", {"turn": 1})
    local.append("user/message", user("u1"), surface_op="append")
    local.append("step/start", {"turn": 1, "step": 1})
    local.append("assistant/message", assistant(1, 1, "a-1-1", "hello"), surface_op="append")
    before = events_end_offsets(topics)

    with pytest.raises(error) as remote_error:
        client.append_many(sid, [draft_])
    assert type(remote_error.value) is error
    if code:
        assert remote_error.value.code == code
    else:  # the core's own class and code, as the in-process session raises them
        with pytest.raises(error) as local_error:
            local.append(
                draft_["type"],
                draft_["data"],
                surface_op=draft_.get("surfaceOp"),
                source_event_seqs=draft_.get("sourceEventSeqs"),
            )
        assert remote_error.value.code == local_error.value.code
        assert remote_error.value.message == local_error.value.message

    assert events_end_offsets(topics) == before
    assert len(client.read(sid)) == 4
    assert client.append(sid, "user/message", user("after"), surface_op="append").seq == 4


def test_writer_level_rejections(topics: KafkaSettings, client: SessionClient) -> None:
    sid = f"limits-{uuid.uuid4().hex[:8]}"
    client.append(sid, "user/message", user("u0"), surface_op="append")
    before = events_end_offsets(topics)

    with pytest.raises(ConflictError) as conflict:
        client.append(sid, "user/message", user("u1"), surface_op="append", expected_seq=0)
    assert conflict.value.code == "EXPECTED_SEQ_MISMATCH"
    assert "expected seq 0" in conflict.value.message

    many = [
        draft("user/message", user(f"m{i}", "y" * 3_000), surface_op="append") for i in range(5)
    ]
    with pytest.raises(PayloadTooLargeError) as too_large:
        client.append_many(sid, many)
    assert too_large.value.code == "COMMAND_TOO_LARGE"

    with pytest.raises(MalformedCommandError):
        client.append_many(sid, [])

    # Beyond what Kafka itself takes: refused by the client, never sent.
    with pytest.raises(PayloadTooLargeError) as beyond_kafka:
        client.append(sid, "user/message", user("huge", "z" * 1_000_000), surface_op="append")
    assert beyond_kafka.value.code == "COMMAND_TOO_LARGE"
    assert "Kafka takes at most" in beyond_kafka.value.message

    # All-or-nothing: the second event fails, so the first is not kept either.
    with pytest.raises(dsh.InvariantError):
        client.append_many(
            sid,
            [
                draft("user/message", user("ok"), surface_op="append"),
                draft("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
            ],
        )
    assert events_end_offsets(topics) == before
    assert (
        client.append(sid, "user/message", user("u2"), surface_op="append", expected_seq=1).seq == 1
    )
    assert [e.data["id"] for e in client.read(sid).events()] == ["u0", "u2"]


def test_a_command_on_the_wrong_partition_is_rejected(
    topics: KafkaSettings, writer: Writer
) -> None:
    sid = f"misplaced-{uuid.uuid4().hex[:8]}"
    wrong = (partition_for(sid, PARTITIONS) + 1) % PARTITIONS
    client_id = f"raw-{uuid.uuid4().hex[:8]}"
    command = AppendCommand("r-wrong", client_id, sid, (draft("user/message", user("u")),))
    producer = Producer(topics.client_config())
    producer.produce(
        topics.topic("commands"), encode_command(command), sid.encode(), partition=wrong
    )
    producer.flush(10)

    replies = Consumer(
        {**topics.client_config(), "group.id": "unused", "isolation.level": "read_committed"}
    )
    replies.assign(
        [TopicPartition(topics.topic("replies"), partition_for(client_id, PARTITIONS), 0)]
    )
    try:
        message = None
        for _ in range(100):
            message = replies.poll(0.2)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None
        error = decode_reply(message.value() or b"").exception()
    finally:
        replies.close()
    assert isinstance(error, WrongPartitionError)
    assert error.code == "WRONG_PARTITION"
    assert events_end_offsets(topics) == [0] * PARTITIONS


def test_a_retried_request_id_appends_once(topics: KafkaSettings, client: SessionClient) -> None:
    sid = f"retry-{uuid.uuid4().hex[:8]}"
    first = client.append(sid, "user/message", user("u0"), surface_op="append", request_id="r0")
    again = client.append(sid, "user/message", user("u0"), surface_op="append", request_id="r0")
    assert again == first
    batch = [
        draft("turn/start", {"turn": 1}),
        draft("user/message", user("u1"), surface_op="append"),
    ]
    events = client.append_many(sid, batch, request_id="r1")
    assert client.append_many(sid, batch, request_id="r1") == events
    # In flight together: one command commits, both futures get its events.
    twice = [client.append_async(sid, "step/start", {"turn": 1, "step": 1}, request_id="r2")]
    twice.append(client.append_async(sid, "step/start", {"turn": 1, "step": 1}, request_id="r2"))
    assert twice[0].result(20) == twice[1].result(20)
    assert [e.seq for e in client.read(sid).events()] == [0, 1, 2, 3]


def _kafka_client_threads() -> int:
    """librdkafka's threads in this process (it names them rdk:main, rdk:broker…)."""
    tasks = Path("/proc/self/task").iterdir()
    return sum(1 for t in tasks if (t / "comm").read_text().startswith("rdk:"))


def test_a_stopped_writer_ends_every_kafka_client_it_made(topics: KafkaSettings) -> None:
    sid = f"close-{uuid.uuid4().hex[:8]}"
    before = _kafka_client_threads()
    with running_writer(topics, writer_settings()) as writer:
        with SessionClient(settings=topics, timeout=20) as client:
            client.append(sid, "turn/start", {"turn": 1})
        assert _kafka_client_threads() > before
    # The writer object is still referenced: its producers must have been closed, not left
    # to the garbage collector.
    assert writer.owned() == []
    wait_for(lambda: _kafka_client_threads() == before, 10, "the writer's clients to end")


def test_a_retry_after_a_writer_restart_is_answered_from_the_log(topics: KafkaSettings) -> None:
    sid = f"restart-{uuid.uuid4().hex[:8]}"
    home = partition_for(sid, PARTITIONS)
    settings = writer_settings(snapshot_every=5, checkpoint_every=4)
    batch = [
        draft("turn/start", {"turn": 1}),
        draft("user/message", user("u1"), surface_op="append"),
    ]
    with SessionClient(settings=topics, timeout=20) as client:
        with running_writer(topics, settings) as first:
            original = client.append_many(sid, batch, request_id="restart-r1")
            for i in range(6):  # past a snapshot and a checkpoint
                client.append(sid, "user/message", user(f"m{i}"), surface_op="append")
            assert first.partitions[home].restored_from == 0
        with running_writer(topics, settings) as second:  # same group: restores from the log
            # From the checkpoint: the snapshot plus the events after it, not the whole topic.
            assert second.partitions[home].restored_from > 0
            assert client.append_many(sid, batch, request_id="restart-r1") == original
            nxt = client.append(sid, "user/message", user("next"), surface_op="append")
        assert nxt.seq == 8
        assert [e.seq for e in client.read_log(sid).events()] == list(range(9))
    with running_writer(topics, writer_settings(group_id=settings.group_id)) as third:
        assert third.partitions[home].sessions[sid].session.events() == client_events(topics, sid)


def test_a_checkpoint_spread_over_batches_restores_every_session(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a tiny per-batch snapshot budget a checkpoint takes several transactions to write;
    a restore from it still has every session, whatever batch snapshotted it."""
    monkeypatch.setattr(snapshots_module, "CHECKPOINT_BYTES_PER_BATCH", 1)  # one session a batch
    tag = uuid.uuid4().hex[:8]
    home = 0
    candidates = (f"spread-{tag}-{i}" for i in range(400))
    sids = [s for s in candidates if partition_for(s, PARTITIONS) == home][:6]
    settings = writer_settings(snapshot_every=1000, checkpoint_every=6)
    with SessionClient(settings=topics, timeout=20) as client:
        with running_writer(topics, settings) as first:
            state = first.partitions[home]
            for sid in sids:  # the 6th event starts the checkpoint: 6 sessions to snapshot
                client.append(sid, "user/message", user("a"), surface_op="append")
            assert state.checkpoint is not None and len(state.checkpoint.uncovered) == 5
            for i in range(5):  # one more session snapshotted per batch
                client.append(sids[0], "user/message", user(f"b{i}"), surface_op="append")
            assert state.checkpoint is None and state.events_since_checkpoint == 5
        with running_writer(topics, settings) as second:
            restored = second.partitions[home]
            assert restored.restored_from > 0  # from the checkpoint, not offset 0
            assert [e.seq for e in restored.sessions[sids[0]].session.events()] == list(range(6))
            for sid in sids[1:]:
                assert [e.seq for e in restored.sessions[sid].session.events()] == [0]
            assert client.append(sids[1], "user/message", user("c"), surface_op="append").seq == 1


def test_a_session_too_large_to_snapshot_neither_stops_checkpoints_nor_is_lost_by_them(
    topics: KafkaSettings,
) -> None:
    """Checkpoints go on past a session too large to snapshot, naming it; a restore from the
    latest one reads that session from its first event, although every one of its events is
    before the checkpoint, and every other session from its snapshot."""

    def checkpoints() -> float:
        value = REGISTRY.get_sample_value("dsh_writer_snapshots_total", {"result": "checkpoint"})
        return value or 0.0

    tag = uuid.uuid4().hex[:8]
    home = 0
    candidates = (f"oversized-{tag}-{i}" for i in range(400))
    big, *smalls = [s for s in candidates if partition_for(s, PARTITIONS) == home][:4]
    settings = writer_settings(snapshot_every=1000, checkpoint_every=4, max_snapshot_bytes=3_000)
    with SessionClient(settings=topics, timeout=20) as client:
        with running_writer(topics, settings) as first:
            before = checkpoints()
            for i in range(4):  # a first checkpoint: the big session starts after it
                client.append(smalls[i % 3], "user/message", user(f"a{i}"), surface_op="append")
            for i in range(3):  # no snapshot of it will ever fit
                client.append(big, "user/message", user(f"b{i}", "b" * 1_500), surface_op="append")
            for i in range(9):
                client.append(smalls[i % 3], "user/message", user(f"c{i}"), surface_op="append")
            assert first.partitions[home].sessions[big].oversized
            assert checkpoints() - before == 4  # at 4, 8, 12 and 16 events of the partition
            expected = {
                sid: first.partitions[home].sessions[sid].session.events() for sid in [big, *smalls]
            }
        with running_writer(topics, writer_settings(group_id=settings.group_id)) as second:
            restored = second.partitions[home]
            assert restored.restored_from > 0  # from the big session's start, not offset 0
            for sid, events in expected.items():
                assert restored.sessions[sid].session.events() == events
            assert client.append(big, "user/message", user("d"), surface_op="append").seq == 3
            assert client.append(smalls[0], "user/message", user("d"), surface_op="append").seq == 5


def test_a_restore_decodes_only_the_latest_snapshot_of_a_session(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until compaction gets to them every snapshot of a session stays in the topic, each with
    all its events so far: decoding them all would cost a restore the session's events once
    per snapshot."""
    sid = f"snapshots-{uuid.uuid4().hex[:8]}"
    home = partition_for(sid, PARTITIONS)
    settings = writer_settings(snapshot_every=2, checkpoint_every=0)
    written = {"result": "written"}
    before = REGISTRY.get_sample_value("dsh_writer_snapshots_total", written) or 0
    with SessionClient(settings=topics, timeout=20) as client, running_writer(topics, settings):
        for i in range(10):
            client.append(sid, "user/message", user(f"m{i}"), surface_op="append")
    snapshots = (REGISTRY.get_sample_value("dsh_writer_snapshots_total", written) or 0) - before
    assert snapshots == 5
    decoded: list[str] = []

    def counted(value: bytes) -> WriterSnapshot:
        snapshot = decode_snapshot(value)
        decoded.append(snapshot.session_id)
        return snapshot

    monkeypatch.setattr(restore_module, "decode_snapshot", counted)
    with running_writer(topics, writer_settings(group_id=settings.group_id)) as second:
        restored = second.partitions[home].sessions[sid].session
        assert [e.seq for e in restored.events()] == list(range(10))
    assert decoded.count(sid) == 1


def client_events(kafka: KafkaSettings, sid: str) -> tuple[dsh.Event, ...]:
    with SessionClient(settings=kafka, timeout=20) as client:
        return client.read(sid).events()


def test_the_hand_assembled_reply_is_the_codecs_own_encoding() -> None:
    events = [
        dsh.Event("turn/start", 7, 1_700_000_000_000, {"turn": 1}),
        dsh.Event("user/message", 8, 1_700_000_000_001, user("ü-1", "é" * 300), "append"),
    ]
    values = [encode_event(e, "sess-ü") for e in events]
    reply = AppendReply.committed("req-1", "client-ß", "sess-ü", events)
    assert committed_reply("req-1", "client-ß", "sess-ü", values) == encode_reply(reply)


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_metrics_count_appends_rejections_round_trips_and_ownership(
    client: SessionClient, writer: Writer
) -> None:
    committed = {"type": "user/message", "result": "committed"}
    duplicate = {"type": "user/message", "result": "duplicate"}
    rejected = {"error": "InvariantError", "code": "NO_OPEN_TURN"}
    before = {
        "committed": _sample("dsh_writer_appends_total", committed),
        "duplicate": _sample("dsh_writer_appends_total", duplicate),
        "duplicate_end": _sample(
            "dsh_writer_appends_total", {"type": "turn/end", "result": "duplicate"}
        ),
        "rejected": _sample("dsh_writer_rejected_commands_total", rejected),
        "round_trips": _sample("dsh_client_append_seconds_count", {"result": "committed"}),
        "commits": _sample("dsh_writer_transaction_commit_seconds_count"),
        "waits": _sample("dsh_writer_command_wait_seconds_count"),
        "phases": _sample("dsh_writer_transaction_phase_seconds_count", {"phase": "commit"}),
    }
    sid = f"metrics-{uuid.uuid4().hex[:8]}"
    for i in range(3):
        client.append(sid, "user/message", user(f"u{i}"), surface_op="append", request_id=f"m{i}")
    client.append(sid, "user/message", user("u0"), surface_op="append", request_id="m0")
    for _ in range(2):  # the retry gets the remembered rejection: a duplicate, not a new one
        with pytest.raises(dsh.InvariantError):
            client.append(
                sid, "turn/end", {"turn": 1, "reason": {"kind": "completed"}}, request_id="end"
            )

    assert _sample("dsh_writer_appends_total", committed) - before["committed"] == 3
    assert _sample("dsh_writer_appends_total", duplicate) - before["duplicate"] == 1
    assert _sample("dsh_writer_rejected_commands_total", rejected) - before["rejected"] == 1
    duplicate_end = {"type": "turn/end", "result": "duplicate"}
    assert _sample("dsh_writer_appends_total", duplicate_end) - before["duplicate_end"] == 1
    round_trips = _sample("dsh_client_append_seconds_count", {"result": "committed"})
    assert round_trips - before["round_trips"] == 4
    assert _sample("dsh_writer_transaction_commit_seconds_count") - before["commits"] >= 5
    assert _sample("dsh_writer_partitions_owned") == PARTITIONS
    assert _sample("dsh_writer_restore_seconds_count") >= PARTITIONS
    assert _sample("dsh_writer_append_latency_seconds_count") > 0
    # Every command taken is timed from its record timestamp: 4 appends and 2 turn/ends.
    assert _sample("dsh_writer_command_wait_seconds_count") - before["waits"] == 6
    # Every transaction is timed in its phases: these, one command each, commit at once.
    phase = {"phase": "commit"}
    commits = _sample("dsh_writer_transaction_phase_seconds_count", phase) - before["phases"]
    assert commits >= 5


def test_an_undecodable_command_goes_to_the_dlq_and_the_writer_carries_on(
    topics: KafkaSettings, client: SessionClient
) -> None:
    sid = f"garbage-{uuid.uuid4().hex[:8]}"
    producer = Producer({**topics.client_config(), "partitioner": "murmur2_random"})
    producer.produce(topics.topic("commands"), b"not avro at all", sid.encode())
    producer.flush(10)
    assert client.append(sid, "user/message", user("u0"), surface_op="append").seq == 0

    dlq = Consumer(
        {**topics.client_config(), "group.id": "unused", "isolation.level": "read_committed"}
    )
    dlq.assign([TopicPartition(topics.topic("dlq"), partition_for(sid, PARTITIONS), 0)])
    try:
        message = None
        for _ in range(100):
            message = dlq.poll(0.2)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None
        headers = dict(message.headers() or [])
    finally:
        dlq.close()
    assert message.value() == b"not avro at all"
    assert message.key() == sid.encode()
    assert headers["dsh-dlq-service"] == b"writer"
    assert headers["dsh-dlq-error"] == b"BadMarkerError"
    assert headers["dsh-dlq-code"] == b"CODEC_BAD_MARKER"
    assert (
        headers["dsh-dlq-source"]
        == f"{topics.topic('commands')}[{partition_for(sid, PARTITIONS)}]@0".encode()
    )


def test_async_appends_commit_in_submission_order_per_session(client: SessionClient) -> None:
    sessions = [f"order-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    # expected_seq makes any reordering a ConflictError: each append must land exactly next.
    futures = [
        (
            sid,
            i,
            client.append_async(
                sid, "user/message", user(f"u{i}"), surface_op="append", expected_seq=i
            ),
        )
        for i in range(100)
        for sid in sessions
    ]
    for sid, i, future in futures:
        ev = future.result(30)
        assert (ev.seq, ev.data["id"]) == (i, f"u{i}"), sid
    for sid in sessions:
        assert [e.data["id"] for e in client.read(sid).events()] == [f"u{i}" for i in range(100)]


def test_a_timed_out_append_is_safe_to_retry_with_its_request_id(topics: KafkaSettings) -> None:
    sid = f"timeout-{uuid.uuid4().hex[:8]}"
    with SessionClient(settings=topics, timeout=1.0) as client:
        with pytest.raises(AppendTimeoutError) as timed_out:  # no writer is running yet
            client.append(sid, "user/message", user("u0"), surface_op="append", request_id="t-1")
        assert timed_out.value.request_id == "t-1"
        assert timed_out.value.code == "APPEND_TIMEOUT"
        with running_writer(topics, writer_settings()):
            # The first command is still on the commands topic: the writer applies it, and
            # answers the retry from its request table instead of appending again.
            retried = client.append(
                sid, "user/message", user("u0"), surface_op="append", request_id="t-1", timeout=20
            )
            assert retried.seq == 0
            assert client.append(sid, "user/message", user("u1"), surface_op="append").seq == 1
        assert [e.data["id"] for e in client.read_log(sid).events()] == ["u0", "u1"]


@pytest.mark.timeout(60)  # the old client waited for ever: fail, not hang CI
def test_a_reply_the_client_cannot_read_fails_the_append_instead_of_hanging(
    client: SessionClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = f"unreadable-{uuid.uuid4().hex[:8]}"
    assert client.append(sid, "user/message", user("u0"), surface_op="append").seq == 0

    def unreadable(self: EventRecord) -> dsh.Event:
        raise ValueError("no such event type in this client")

    with monkeypatch.context() as m:
        m.setattr(EventRecord, "to_event", unreadable)
        # The client's own timeout (20 s): the reply must arrive before it for the error to be
        # the one under test, and a loaded machine can take over a second to commit one. The
        # old client waited for ever whatever the timeout: the mark above fails it.
        with pytest.raises(ReplyUndecodableError, match="may have committed"):
            client.append(sid, "user/message", user("u1"), surface_op="append")
    # It had: the writer committed it before its reply was read.
    assert [e.seq for e in client.read_log(sid).events()] == [0, 1]


def test_offsets_are_only_sent_with_group_metadata_the_broker_checks(
    topics: KafkaSettings,
) -> None:
    member = Consumer({**topics.client_config(), "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    try:
        member.subscribe([topics.topic("commands")])

        def joined() -> bool:
            member.poll(0.1)
            return bool(member.assignment())

        # A join waits on the group coordinator, which a loaded machine can slow for seconds:
        # bounded against a hang only (it was 100 polls of 0.1 s, 10 s at most).
        wait_for(joined, 30, "the member joining its group")
        assert not unfenced(member.consumer_group_metadata())  # a live member
    finally:
        member.close()
    # What librdkafka hands out once membership is gone: generation -1, no member id.
    assert unfenced(b"CGMDv2:\xff\xff\xff\xffdsh-writer\x00\x00\x01")
    assert unfenced(b"CGMDv2:\x05\x00\x00\x00dsh-writer\x00\x00\x01")
    assert not unfenced(b"CGMDv2:\x05\x00\x00\x00dsh-writer\x00rdkafka-1\x00\x01")


def test_a_session_too_large_to_snapshot_is_tried_again_only_every_n_events(
    topics: KafkaSettings,
) -> None:
    def skipped() -> float:
        value = REGISTRY.get_sample_value("dsh_writer_snapshots_total", {"result": "skipped"})
        return value or 0.0

    sid = f"big-{uuid.uuid4().hex[:8]}"
    settings = writer_settings(snapshot_every=3, max_snapshot_bytes=1)
    with running_writer(topics, settings), SessionClient(settings=topics, timeout=20) as client:
        before = skipped()
        for i in range(8):
            client.append(sid, "user/message", user(f"m{i}"), surface_op="append")
        # At events 3 and 6 only; re-encoding the session on every later append would make
        # each append cost the session's length.
        assert skipped() - before == 2


@pytest.mark.parametrize("snapshots", [True, False], ids=["from a snapshot", "from the log"])
def test_a_session_created_without_invariants_keeps_its_mode_across_restores(
    topics: KafkaSettings, snapshots: bool
) -> None:
    """The mode is fixed when the session is created: a writer that restores it, from its
    snapshot or from its first event's header, goes on without the turn invariants, and a
    read says so. Asking for the other mode later is refused."""
    sid = f"bare-{uuid.uuid4().hex[:8]}"
    home = partition_for(sid, PARTITIONS)
    settings = writer_settings(snapshot_every=2 if snapshots else 1000)
    outside = [draft("assistant/message", assistant(mid="a0"), surface_op="append")]
    with SessionClient(settings=topics, timeout=20) as client:
        with running_writer(topics, settings):
            with pytest.raises(dsh.InvariantError):  # the default: on
                client.append_many(f"{sid}-on", outside)
            client.append_many(sid, outside, invariants=False)
            client.append(sid, "user/message", user("u1"), surface_op="append")
        with running_writer(topics, writer_settings(group_id=settings.group_id)) as second:
            restored = second.partitions[home].sessions[sid].session
            assert restored.invariants is False and len(restored) == 2
            again = [draft("assistant/message", assistant(mid="a1"), surface_op="append")]
            assert client.append_many(sid, again)[0].seq == 2
            with pytest.raises(InvariantsModeError):
                client.append_many(sid, again, invariants=True)
            read = client.read(sid)  # the writer answers it
            assert read.invariants is False and len(read) == 3
        assert client.read_log(sid).invariants is False  # from the log alone
