"""Kafka clients built from ``KafkaSettings``: the one place a service makes one.

Every client gets the settings' security (SASL, TLS) and the ``error_cb`` that turns a refused
login or an unverified broker certificate into a typed error (:mod:`servicekit.kafka_errors`).
The kinds differ only in what their job needs: a keyed producer, a transactional producer, a
member of a consumer group, an assign-only reader, an admin client.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from servicekit.kafka_errors import FailFast
from servicekit.partition_reader import refresh_metadata
from servicekit.partitioning import PRODUCER_PARTITIONER
from servicekit.settings import ConfigError, KafkaSettings

# How long a tailing consumer's fetch may wait at the broker for records. Records (and, for
# read_committed, the markers that make them visible) complete a waiting fetch at once, so a
# long wait costs no latency; a short one makes the broker answer an empty fetch every few
# ms for every idle consumer (bench/idle_fetch_bench.py: two idle consumers cost the broker
# 13-36 % of a core at 5 ms, under 1 % at 500 ms). Readers that detect the end of a partition
# keep a short wait of their own: there the wait is the delay before "end of partition".
TAIL_FETCH_WAIT = {"fetch.wait.max.ms": 500}
# The broker refuses records above ~1 MB by default (key and headers included, hence the
# margin): a client's command, and a writer's reply, must fit under it.
MAX_RECORD_BYTES = 990_000


# librdkafka's properties that come from our settings (``KafkaSettings.client_config``: a
# field's name with dots), by the variable a person sets.
_VARIABLES = {
    name.replace("_", "."): f"{KafkaSettings.model_config.get('env_prefix', '')}{name.upper()}"
    for name in KafkaSettings.model_fields
}


C = TypeVar("C")


def _made(kind: Callable[[dict[str, Any]], C], config: dict[str, Any]) -> C:
    """``kind(config)``, or, when librdkafka refuses the settings (a SASL login without its
    password, a CA file it cannot load), the typed error naming our variables: it checks them
    only here, before any broker is asked, and its KafkaException reached the user as a
    traceback naming its own property names."""
    try:
        return kind(config)
    except KafkaException as exc:
        err = exc.args[0]
        if not isinstance(err, KafkaError) or err.code() != KafkaError._INVALID_ARG:
            raise
        reason = err.str()
    named = [(prop, v) for prop, v in _VARIABLES.items() if prop in reason]
    missing = [
        f"{v}={config[prop]}: no such file"
        for prop, v in named
        if prop in config and prop.endswith(".location") and not os.path.exists(config[prop])
    ]
    detail = "; ".join(missing)
    if named and not detail:
        detail = f"check {', '.join(v for _, v in named)}"
    fail_fast = config.get("error_cb")
    message = f"the Kafka settings were refused ({reason}){'; ' + detail if detail else ''}"
    raise ConfigError(
        fail_fast.scrub(message) if isinstance(fail_fast, FailFast) else message,
        code="KAFKA_CLIENT_CONFIG",
    ) from None


def producer(kafka: KafkaSettings, **config: Any) -> Producer:
    """A producer that places keyed records as Java clients do; ``config`` adds librdkafka
    settings (``transactional.id``, ``enable.idempotence``, ``linger.ms``, …)."""
    return _made(Producer, {**kafka.client_config(), **PRODUCER_PARTITIONER, **config})


def admin(kafka: KafkaSettings, *, quiet: bool = False) -> AdminClient:
    """An admin client. ``quiet``: librdkafka does not print each failed connection attempt
    to stderr (a command-line tool reports the failure itself, once)."""
    config: dict[str, Any] = kafka.client_config()
    if quiet:
        config |= {"socket.connection.setup.timeout.ms": 10_000, "log_level": 0}
    return _made(AdminClient, config)


def reader(
    kafka: KafkaSettings,
    isolation: str = "read_committed",
    topics: Sequence[str] = (),
    **config: Any,
) -> Consumer:
    """A consumer for explicit assignments only (it never joins its group, never commits) that
    reports the end of each partition, with the metadata of ``topics`` fetched up front:
    librdkafka asks for an assigned topic it does not know only at its next periodic scan,
    then retries the start offset on a 500 ms timer, so the first read of each topic took
    0.5-1.5 s instead of milliseconds. ``config`` adds librdkafka settings (the export sizes
    its prefetch with them)."""
    consumer = _made(
        Consumer,
        {
            **kafka.client_config(),
            "group.id": "dsh-reader-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            # A start offset deleted by retention meanwhile: the earliest left, not the end.
            "auto.offset.reset": "earliest",
            **config,
        },
    )
    for topic in topics:
        refresh_metadata(consumer, topic)
    return consumer


def tail_reader(kafka: KafkaSettings) -> Consumer:
    """An assign-only read_committed consumer that follows a partition as it grows (a client's
    replies): it waits at the broker for records instead of reporting ends."""
    return _made(
        Consumer,
        {
            **kafka.client_config(),
            "group.id": "dsh-client-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            **TAIL_FETCH_WAIT,
        },
    )


def offsets_peek(kafka: KafkaSettings, group_id: str) -> Consumer:
    """A client of ``group_id`` that never joins it, to read its committed offsets (and their
    metadata) without waiting for the transactions that hold them (read_uncommitted)."""
    return _made(
        Consumer,
        {
            **kafka.client_config(),
            "group.id": group_id,
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        },
    )


def group_consumer(
    kafka: KafkaSettings,
    group_id: str,
    *,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    client_id: str | None = None,
    instance_id: str | None = None,
    max_poll_interval_ms: int | None = None,
    on_commit: Callable[[KafkaError | None, list[TopicPartition]], None] | None = None,
) -> Consumer:
    """A member of ``group_id`` that reads committed records and commits offsets by hand (the
    writer in its transactions, a projector after Redis acknowledged a batch).

    Cooperative: a member joining or leaving moves only the partitions that change hands, and
    every other member keeps working through the rebalance. A heartbeat is how a member hears
    of a rebalance (each moved partition waits for it twice: revoked, then assigned), so it is
    frequent, and capped at a third of the session timeout as Kafka requires."""
    config: dict[str, Any] = {
        **kafka.client_config(),
        "group.id": group_id,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": min(heartbeat_interval_ms, session_timeout_ms // 3),
        **TAIL_FETCH_WAIT,
    }
    if client_id is not None:
        config["client.id"] = client_id
    if instance_id is not None:
        config["group.instance.id"] = instance_id
    if max_poll_interval_ms is not None:
        config["max.poll.interval.ms"] = max_poll_interval_ms
    if on_commit is not None:
        config["on_commit"] = on_commit
    return _made(Consumer, config)


def partition_ids(partitions: Iterable[TopicPartition]) -> list[int]:
    """The partition numbers of a rebalance callback's list, sorted: what a log line shows."""
    return sorted(tp.partition for tp in partitions)


class PartitionOwner(Protocol):
    """What a group member does when partitions come and go (see :class:`Membership`)."""

    def owned(self) -> list[int]:
        """The partitions it serves now, for log lines."""
        ...

    def assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Take the partitions on; returns them with the offsets to start from."""
        ...

    def revoke(self, partitions: list[TopicPartition]) -> None:
        """Let the partitions go; its work on them is settled before this returns."""
        ...


class Membership:
    """A group consumer subscribed with incremental rebalance callbacks that call ``owner``.

    Callbacks run inside ``poll``. An exception raised out of one reaches the caller of
    ``poll`` without its type, so it is kept instead and re-raised by :meth:`raise_pending`
    right after ``poll`` returns."""

    def __init__(
        self,
        consumer: Consumer,
        topics: Sequence[str],
        owner: PartitionOwner,
        log: logging.Logger,
        name: str,
    ) -> None:
        self.consumer = consumer
        self._owner = owner
        self._log = log
        self._name = name
        self._error: Exception | None = None
        # Whether the group has given this member an assignment yet (an empty one too: more
        # members than partitions). Before that, it serves nothing and knows no lag.
        self.joined = False
        consumer.subscribe(
            list(topics), on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )

    def raise_pending(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.joined = True
        if not partitions:
            return
        try:
            consumer.incremental_assign(self._owner.assign(partitions))
        except Exception as exc:
            self._error = exc
            return
        self._log.info(
            "%s: partitions assigned %s; owning %s",
            self._name,
            partition_ids(partitions),
            self._owner.owned(),
        )

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        try:
            self._owner.revoke(partitions)
        except Exception as exc:
            self._error = exc
        consumer.incremental_unassign(partitions)
        self._log.info(
            "%s: partitions revoked %s; owning %s",
            self._name,
            partition_ids(partitions),
            self._owner.owned(),
        )

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._log.warning(
            "%s: partitions lost %s (membership expired)", self._name, partition_ids(partitions)
        )
        self._revoked(consumer, partitions)
