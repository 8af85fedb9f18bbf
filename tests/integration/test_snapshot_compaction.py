"""A writer restores from the snapshots topic as Kafka's log cleaner leaves it: older snapshots
of a session, of the checkpoint and of the rejection slots gone, offsets with holes. The topic's
segments roll every 100 ms here so that the cleaner gets to them within the test; in production
``max.compaction.lag.ms`` (servicekit/topics.py) bounds how long they wait."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, not re-exported
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

import dsh
from producers import SessionClient
from servicekit import kafka_clients
from servicekit.partition_reader import high_watermark, read_partitions
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import (
    PARTITIONS,
    running_writer,
    writer_settings,
)
from tests.support.builders import user
from tests.support.waiting import wait_for


def _set_topic_config(kafka: KafkaSettings, topic: str, config: dict[str, str]) -> None:
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in config.items()
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin = AdminClient(kafka.client_config())
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def _topic_config(kafka: KafkaSettings, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient(kafka.client_config())
    (future,) = admin.describe_configs([resource]).values()
    return {name: entry.value for name, entry in future.result(timeout=30).items()}


def _versions(kafka: KafkaSettings, topic: str, partition: int) -> Counter[bytes | None]:
    """How many records of each key the partition holds now."""
    reader = kafka_clients.reader(kafka, topics=[topic])
    probe = kafka_clients.reader(kafka, "read_uncommitted", [topic])
    try:
        end = high_watermark(probe, topic, partition)
        return Counter(
            m.key() for m in read_partitions(reader, topic, {partition: (None, end)}, 30.0)
        )
    finally:
        reader.close()
        probe.close()


def _rejected(call: object) -> dsh.SessionError:
    with pytest.raises(dsh.SessionError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_a_writer_restores_from_a_snapshots_topic_the_log_cleaner_has_compacted(
    topics: KafkaSettings,
) -> None:
    tag = uuid.uuid4().hex[:8]
    home = 0
    sids = [
        s
        for s in (f"compacted-{tag}-{i}" for i in range(400))
        if partition_for(s, PARTITIONS) == home
    ][:3]
    snapshots_topic = topics.topic("snapshots")
    created = _topic_config(topics, snapshots_topic)
    assert (created["cleanup.policy"], created["max.compaction.lag.ms"]) == ("compact", "3600000")
    # Segments roll every 100 ms, but the cleaner leaves records alone until the lag is lifted:
    # it wakes every 15 s (log.cleaner.backoff.ms), maybe between the writes and their count.
    _set_topic_config(
        topics,
        snapshots_topic,
        {
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": created["max.compaction.lag.ms"],
        },
    )
    settings = writer_settings(snapshot_every=2, checkpoint_every=4)
    end = {"turn": 1, "reason": {"kind": "completed"}}
    with SessionClient(settings=topics, timeout=20) as client:
        with running_writer(topics, settings):
            for n in range(6):
                for sid in sids:
                    client.append(sid, "user/message", user(f"m{n}"), surface_op="append")
                time.sleep(0.15)  # past segment.ms: the next record rolls a new segment
            no_turn = _rejected(
                lambda: client.append(sids[0], "turn/end", end, request_id="r-no-turn")
            )
        written = _versions(topics, snapshots_topic, home)
        # Every 2 events, and the checkpoints' (every 4 events of the partition).
        assert all(written[sid.encode()] >= 3 for sid in sids), written
        _set_topic_config(topics, snapshots_topic, {"min.compaction.lag.ms": "0"})

        def compacted() -> bool:
            now = _versions(topics, snapshots_topic, home)
            return all(now[sid.encode()] < written[sid.encode()] for sid in sids)

        wait_for(compacted, 60, "the log cleaner compacting the snapshots topic")
        print(written, _versions(topics, snapshots_topic, home))

        with running_writer(topics, writer_settings(group_id=settings.group_id)) as second:
            restored = second.partitions[home]
            assert restored.restored_from > 0  # from the checkpoint: the snapshots were used
            for sid in sids:
                assert restored.sessions[sid].session.events() == client.read(sid).events()
            # A turn is open now, so the retried turn/end would commit if validated again: only
            # the rejection remembered on the compacted topic can answer it.
            client.append(sids[0], "turn/start", {"turn": 1})
            retried = _rejected(
                lambda: client.append(sids[0], "turn/end", end, request_id="r-no-turn")
            )
            assert (type(retried), retried.code, retried.message) == (
                type(no_turn),
                no_turn.code,
                no_turn.message,
            )
            assert len(client.read(sids[0])) == 7
            assert (
                client.append(sids[1], "user/message", user("next"), surface_op="append").seq == 6
            )
