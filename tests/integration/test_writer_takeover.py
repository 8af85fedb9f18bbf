"""A new owner does not wait out a dead writer's open transaction: it fences the writers named
in the offsets' metadata that have left the group (producers/writer/takeover.py), against the real
broker. A writer still in the group is never fenced."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from producers import SessionClient
from producers.writer.takeover import (
    fence_stuck_owners,
    offsets_metadata,
    parse_offsets_metadata,
)
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    PARTITIONS,
    WriterProcess,
    split,
    stop_mid_batch,
)
from tests.support.waiting import wait_for

ALL = list(range(PARTITIONS))


def test_offsets_metadata_names_a_writer_and_nothing_else_parses() -> None:
    assert parse_offsets_metadata(offsets_metadata("dsh-writer-abc", 2)) == ("dsh-writer-abc", 2)
    for other in (None, "", "x", "[]", '{"writer": 3, "lanes": 1}', '{"writer": "w"}'):
        assert parse_offsets_metadata(other) is None
    assert parse_offsets_metadata('{"writer": "w", "lanes": 9}') is None
    assert parse_offsets_metadata('{"writer": "w", "lanes": true}') is None


def _group_member(kafka: KafkaSettings, group: str, client_id: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": group,
            "client.id": client_id,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    return consumer


def test_only_a_writer_that_left_the_group_is_fenced(topics: KafkaSettings) -> None:
    group = f"dsh-writer-{uuid.uuid4().hex[:8]}"
    commands = topics.topic("commands")
    gone, alive = f"gone-{uuid.uuid4().hex[:6]}", f"alive-{uuid.uuid4().hex[:6]}"
    # Offsets of partition 0 last committed by `gone`, of partition 1 by `alive`.
    committer = Consumer({**topics.client_config(), "group.id": group})
    committer.commit(
        offsets=[
            TopicPartition(commands, 0, 0, metadata=offsets_metadata(gone, 2)),
            TopicPartition(commands, 1, 0, metadata=offsets_metadata(alive, 1)),
        ],
        asynchronous=False,
    )
    committer.close()
    # `gone` has a transaction open, as a writer killed mid-batch would.
    victim = Producer({**topics.client_config(), "transactional.id": gone})
    victim.init_transactions(30)
    victim.begin_transaction()
    victim.produce(topics.topic("events"), b"never committed", partition=0)
    victim.flush(30)

    member = _group_member(topics, group, alive, commands)
    peek = Consumer(
        {**topics.client_config(), "group.id": group, "isolation.level": "read_uncommitted"}
    )
    try:
        # Joined once it has an assignment; its heartbeats then keep it in the group without
        # further polls (the max poll interval is minutes).
        wait_for(
            lambda: member.poll(0.2) is None and bool(member.assignment()),
            30,
            "the live writer's stand-in joining the group",
        )
        both = [TopicPartition(commands, p) for p in (0, 1)]
        fenced = fence_stuck_owners(topics, group, "me", peek, both, 10_000)
        assert fenced == [gone, f"{gone}-1"]  # both lanes; `alive` is a member: left alone
        # The victim's transaction was aborted and its producer fenced.
        try:
            victim.commit_transaction(30)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            assert err.fatal() or err.txn_requires_abort(), err
        else:
            raise AssertionError("a fenced producer committed")
        # Its own id is never fenced, and neither is a writer that is not named.
        assert fence_stuck_owners(topics, group, gone, peek, both[:1], 10_000) == []
    finally:
        member.close()
        peek.close()


def test_a_dead_owners_open_transaction_is_fenced_not_waited_out(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    """With a transaction timeout of 60 s, waiting out the dead writer's transaction would
    keep its partitions from their new owner for over a minute; fencing frees them within
    seconds of its group session expiring."""
    settings: dict[str, object] = {
        "group_id": f"dsh-writer-{uuid.uuid4().hex[:8]}",
        "metrics_port": 0,
        "session_timeout_ms": 6000,
        "transaction_timeout_ms": 60_000,
        "fence_after_ms": 1000,
    }
    a = WriterProcess(topics, tmp_path / "a.log", failpoint="stop-before-commit:dead-1", **settings)
    b = WriterProcess(topics, tmp_path / "b.log", **settings)
    try:
        wait_for(lambda: split(a, b), 60, "two writers splitting the partitions")
        with SessionClient(settings=topics, timeout=60) as client:
            # A stops with the batch's offsets sent to its transaction, uncommitted.
            sid, held = stop_mid_batch(client, a, "dead-1")
            a.kill()
            wait_for(lambda: b.owned() == ALL, 40, "the other writer taking every partition")
            assert held.result(30).seq == 3  # B answers it from the commands log
            events = client.read_log(sid).events()
            assert [e.data["id"] for e in events] == ["warm-0", "warm-1", "warm-2", "dead-1"]
        log = b.log()
        assert "fenced dsh-writer-" in log, log[-2000:]
    finally:
        a.close()
        b.close()
