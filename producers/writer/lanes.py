"""The writer's producers, one per *lane*, each with a transactional id of its own.

With commit overlap there are two lanes that take turns (:mod:`.pipeline`); without, one. A
lane whose producer cannot go on (a fatal error, a transaction that timed out at its
coordinator) gets a new producer with the same transactional id: its ``init_transactions``
ends whatever transaction the old one left and bumps the epoch, so the old one is fenced for
good (:func:`.recovery.ending` decides).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from confluent_kafka import KafkaError, KafkaException, Producer

from producers.errors import WriterFencedError
from producers.writer import metrics, recovery
from producers.writer.recovery import Ending
from producers.writer.settings import WriterSettings
from producers.writer.takeover import lane_id
from servicekit import kafka_clients
from servicekit.settings import KafkaSettings

log = logging.getLogger("dsh.writer")

KAFKA_TIMEOUT_S = 30.0
# Shutdown waits this long at most for an abort: SIGTERM has a deadline of its own (k8s: 30 s).
_CLOSE_TIMEOUT_S = 5.0
_BACKOFF_FIRST_S = 0.2
_BACKOFF_MAX_S = 5.0

Watch = Callable[[str, float], AbstractContextManager[None]]


class Lanes:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: WriterSettings,
        writer_id: str,
        *,
        watch: Watch,
        stop: threading.Event,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.writer_id = writer_id
        self.shared_id = bool(settings.transactional_id)  # another process may start with it
        self.watch = watch
        self._stop = stop
        self.producers: list[Producer] = []
        self.open: set[int] = set()  # lanes with a transaction begun and not ended
        self._replacements = 0  # new producers since the last committed transaction

    def __len__(self) -> int:
        return len(self.producers)

    def __getitem__(self, lane: int) -> Producer:
        return self.producers[lane]

    def start(self) -> None:
        lanes = 2 if self.settings.overlap_commits else 1
        self.producers = [self._new_producer(i) for i in range(lanes)]
        for producer in self.producers:
            with self.watch("init_transactions", KAFKA_TIMEOUT_S):
                producer.init_transactions(KAFKA_TIMEOUT_S)

    def close(self) -> None:
        """End the producers now rather than at garbage collection (their threads would go on
        reconnecting to a broker that is gone). A transaction begun and not committed is
        aborted first: its commands go to the next owner with their offsets. A producer whose
        abort failed is left to the collector, as closing it would try the abort again and
        wait for a coordinator that did not answer."""
        for lane, producer in enumerate(self.producers):
            if lane in self.open:
                try:
                    with self.watch("abort_transaction", _CLOSE_TIMEOUT_S):
                        producer.abort_transaction(_CLOSE_TIMEOUT_S)
                except KafkaException as exc:
                    log.warning("%s: abort at shutdown: %s", self.lane_id(lane), exc)
                    continue
                self.open.discard(lane)
            try:
                producer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("%s: close: %s", self.lane_id(lane), exc)
        self.producers = []

    def lane_id(self, lane: int) -> str:
        return lane_id(self.writer_id, lane)

    def _new_producer(self, lane: int) -> Producer:
        s = self.settings
        return kafka_clients.producer(
            self.kafka,
            **{
                "transactional.id": self.lane_id(lane),
                "transaction.timeout.ms": s.transaction_timeout_ms,
                # librdkafka's default backoff puts a ~100 ms floor under back-to-back
                # transactions (the coordinator answers CONCURRENT_TRANSACTIONS for a moment).
                "retry.backoff.ms": 1,
                "retry.backoff.max.ms": 10,
                "linger.ms": s.linger_ms,
                "socket.timeout.ms": min(60_000, s.transaction_timeout_ms),
            },
        )

    def begin(self, lane: int) -> Producer:
        producer = self.producers[lane]
        with self.watch("begin_transaction", KAFKA_TIMEOUT_S):  # local, no timeout
            producer.begin_transaction()
        self.open.add(lane)
        return producer

    def abort(self, lane: int) -> None:
        with self.watch("abort_transaction", KAFKA_TIMEOUT_S):
            self.producers[lane].abort_transaction(KAFKA_TIMEOUT_S)
        self.open.discard(lane)

    def committed(self, lane: int) -> None:
        self.open.discard(lane)
        self._replacements = 0

    def abort_quietly(self) -> None:
        for lane in sorted(self.open):
            try:
                self.abort(lane)
            except KafkaException as exc:
                log.error("abort failed: %s", exc)

    def end(self, lane: int, err: KafkaError | None) -> None:
        """Ends the lane's failed (``err``) or abandoned transaction: aborted, or the producer
        replaced when it cannot abort."""
        if recovery.ending(err) is Ending.REPLACE:
            assert err is not None
            how = "failed fatally" if err.fatal() else "timed out"
            log.warning("transaction %s: %s", how, err)
            self._replace_producer(lane, err)
            return
        if err is not None:
            log.warning("transaction aborted: %s", err)
        try:
            self.abort(lane)
        except KafkaException as abort_exc:
            abort_err: KafkaError = abort_exc.args[0]
            if recovery.fenced(abort_err, shared_id=self.shared_id):
                raise WriterFencedError(
                    f"writer {self.writer_id}: abort failed: {abort_err.str()}"
                ) from abort_exc
            log.warning("abort failed: %s", abort_err)
            self._replace_producer(lane, abort_err)

    def _replace_producer(self, lane: int, cause: KafkaError) -> None:
        """A new producer with the lane's transactional id, in place of one that cannot go
        on. Partition state is dropped by the caller and restored from the log."""
        self._replacements += 1
        if self._replacements > recovery.MAX_REPLACEMENTS:
            raise WriterFencedError(
                f"writer {self.writer_id}: {recovery.MAX_REPLACEMENTS} new producers in a row "
                f"failed before a transaction committed; last: {cause.str()}"
            )
        old = self.producers[lane]
        self.open.discard(lane)
        try:
            # Nothing of the failed transaction may still go out (the new producer's epoch
            # fences it anyway); a producer in a fatal state may refuse even this.
            old.purge(blocking=False)
        except KafkaException as exc:
            log.info("purging the old producer: %s", exc.args[0])
        metrics.PRODUCER_REPLACEMENTS.inc()
        deadline = time.monotonic() + self.settings.max_poll_interval_ms / 2000
        backoff = _BACKOFF_FIRST_S
        while True:
            producer = self._new_producer(lane)
            try:
                with self.watch("init_transactions", KAFKA_TIMEOUT_S):
                    producer.init_transactions(KAFKA_TIMEOUT_S)
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if (
                    recovery.fenced(err, shared_id=self.shared_id)
                    or self._stop.is_set()
                    or time.monotonic() + backoff > deadline
                ):
                    raise WriterFencedError(
                        f"writer {self.lane_id(lane)}: no new producer: {err.str()}"
                    ) from exc
                log.warning(
                    "a new producer could not start (%s); trying again in %.1fs", err, backoff
                )
                del producer
                time.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            self.producers[lane] = producer
            del old
            log.warning(
                "new producer for %s (the old one failed: %s); restoring from the log",
                self.lane_id(lane),
                cause,
            )
            return
