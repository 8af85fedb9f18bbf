"""``SessionClient``: append to sessions through the writer, and read them back.

Commands go to the commands topic keyed by session id (Kafka's default partitioner, so the
writer owning that partition gets them in submission order). Each reply comes back on this
client's partition of the replies topic, inside the writer's transaction, so a future resolves
only with events that are committed. One background thread serves delivery reports, replies
and timeouts.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from pydantic import SecretStr

import dsh
from dsh.errors import SessionError
from dsh.projections import Interpreter
from producers import client_metrics as metrics
from producers.errors import AppendTimeoutError, PayloadTooLargeError, WriterUnavailableError
from producers.session_reader import read_session
from producers.tenancy import tenant_headers
from schemas import (
    APPEND_COMMAND,
    HEADER_REQUEST,
    AppendCommand,
    decode_reply,
    draft,
    encode_command,
    header,
    record_headers,
)
from servicekit import kafka_clients
from servicekit.kafka_errors import KafkaAuthenticationError, KafkaTlsError
from servicekit.partition_reader import high_watermark
from servicekit.partitioning import partition_for
from servicekit.settings import ConfigError, KafkaSettings
from servicekit.topics import partition_counts

log = logging.getLogger("dsh.client")

# The broker refuses records above ~1 MB by default (key and headers included, hence the
# margin); the writer's own lower limits come back as typed rejections, this one is what
# Kafka would refuse outright.
MAX_RECORD_BYTES = 990_000
# Longer than any append should wait before it is even sent.
MAX_LINGER_MS = 1000.0
# Topics created a moment ago may not be in every broker's metadata yet.
_TOPICS_APPEAR_S = 5.0

Draft = Mapping[str, Any]


def command_headers(request_id: str) -> list[tuple[str, str | bytes | None]]:
    """The headers of an append command's record (a tenant's credential comes on top)."""
    return [*record_headers(APPEND_COMMAND), (HEADER_REQUEST, request_id.encode())]


@dataclass
class _Pending:
    future: Future[Any]
    session_id: str
    sent_at: float
    deadline: float
    single: bool


class SessionClient:
    def __init__(
        self,
        bootstrap_servers: str | None = None,
        *,
        settings: KafkaSettings | None = None,
        client_id: str | None = None,
        timeout: float = 30.0,
        tenant: str | None = None,
        tenant_key: SecretStr | None = None,
        linger_ms: float = 1.0,
        interpreters: Mapping[str, Interpreter] | None = None,
    ) -> None:
        """``tenant``/``tenant_key``: the credential a writer with tenant prefixes checks.

        ``interpreters``: the message-projection interpreters :meth:`read` restores sessions
        with (a session that logged a projection event restores only with its interpreter).

        ``linger_ms``: how long a command may wait in the client so that commands sent close
        together reach the broker in one request. Each request costs the broker CPU; a
        client sending hundreds of appends per second spares it a request per command with a
        few ms (5 ms at 1,000 appends/s; docs/operations.md, "Tuning"), at the cost of up to
        that long on each append."""
        if not 0 <= linger_ms <= MAX_LINGER_MS:
            raise ConfigError(
                f"linger_ms must be between 0 and {MAX_LINGER_MS}, got {linger_ms}",
                code="BAD_LINGER",
            )
        self._tenant = (
            (tenant, tenant_key.get_secret_value().encode()) if tenant and tenant_key else None
        )
        if settings is None:
            settings = (
                KafkaSettings(bootstrap_servers=bootstrap_servers)
                if bootstrap_servers
                else KafkaSettings()
            )
        elif bootstrap_servers:
            settings = settings.model_copy(update={"bootstrap_servers": bootstrap_servers})
        self.settings = settings
        self.client_id = client_id or f"client-{uuid.uuid4().hex}"
        self.timeout = timeout
        self.interpreters = dict(interpreters or {})
        self._commands = settings.topic("commands")
        self._events = settings.topic("events")
        replies = settings.topic("replies")
        counts = partition_counts(
            settings, [self._commands, self._events, replies], appear_s=_TOPICS_APPEAR_S
        )
        self._event_partitions = counts[self._events]
        self._key = self.client_id.encode()
        # Request ids only need to be unique per session: a random prefix per client and a
        # counter, instead of a uuid4 (an urandom call) per append.
        self._request_prefix = f"{uuid.uuid4().hex[:16]}-"
        self._request_numbers = itertools.count()
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._refused: KafkaAuthenticationError | KafkaTlsError | None = None
        self._producer = kafka_clients.producer(
            settings,
            **{
                "enable.idempotence": True,  # keeps per-session order across retries
                "linger.ms": linger_ms,
                # Success is learnt from the writer's reply; a report per record would only
                # cost a Python callback each.
                "delivery.report.only.error": True,
                "on_delivery": self._undelivered,
            },
        )
        self._replies = kafka_clients.tail_reader(settings)
        tp = TopicPartition(replies, partition_for(self.client_id, counts[replies]))
        try:
            # Start at the current end: every reply for this (new) client id comes later.
            end = high_watermark(self._replies, replies, tp.partition)
            self._replies.assign([TopicPartition(replies, tp.partition, end)])
        except BaseException:
            # The error's traceback holds this half-built client: without a close its
            # consumer would live on in it, fetching and logging.
            self._replies.close()
            raise
        self._thread = threading.Thread(
            target=self._serve, name=f"dsh-client-{self.client_id}", daemon=True
        )
        self._thread.start()

    # -- appends --------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        type: str,
        data: Any,
        *,
        surface_op: Any = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
        expected_seq: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> dsh.Event:
        """The committed event, or the writer's rejection as the core's own error class.
        ``AppendTimeoutError``: unknown outcome, retry with the same ``request_id``."""
        future = self.append_async(
            session_id,
            type,
            data,
            surface_op=surface_op,
            source_event_seqs=source_event_seqs,
            ignorable=ignorable,
            expected_seq=expected_seq,
            request_id=request_id,
            timeout=timeout,
        )
        try:
            result: dsh.Event = future.result()
            return result
        finally:
            # A raised error's traceback holds this frame, and the frame the future that
            # holds the error: a cycle per failed append, freed only by the cycle collector.
            del future

    def append_async(
        self,
        session_id: str,
        type: str,
        data: Any,
        *,
        surface_op: Any = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
        expected_seq: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> Future[dsh.Event]:
        d = draft(
            type,
            data,
            surface_op=surface_op,
            source_event_seqs=source_event_seqs,
            ignorable=ignorable,
        )
        return self._submit(session_id, [d], expected_seq, request_id, timeout, single=True)

    def append_many(
        self,
        session_id: str,
        drafts: Iterable[Draft],
        *,
        expected_seq: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> list[dsh.Event]:
        """Append several events all-or-nothing (drafts from ``schemas.draft``)."""
        future = self.append_many_async(
            session_id, drafts, expected_seq=expected_seq, request_id=request_id, timeout=timeout
        )
        try:
            result: list[dsh.Event] = future.result()
            return result
        finally:
            del future  # as in append

    def append_many_async(
        self,
        session_id: str,
        drafts: Iterable[Draft],
        *,
        expected_seq: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> Future[list[dsh.Event]]:
        return self._submit(
            session_id, [dict(d) for d in drafts], expected_seq, request_id, timeout, single=False
        )

    def _submit(
        self,
        session_id: str,
        drafts: list[dict[str, Any]],
        expected_seq: int | None,
        request_id: str | None,
        timeout: float | None,
        *,
        single: bool,
    ) -> Future[Any]:
        future: Future[Any] = Future()
        if self._closed.is_set():
            future.set_exception(WriterUnavailableError("the client is closed"))
            return future
        if self._refused is not None:
            future.set_exception(self._refused)
            return future
        rid = request_id or f"{self._request_prefix}{next(self._request_numbers)}"
        try:
            value = encode_command(
                AppendCommand(rid, self.client_id, session_id, tuple(drafts), expected_seq)
            )
        except SessionError as exc:
            future.set_exception(exc)
            return future
        if len(value) > MAX_RECORD_BYTES:
            future.set_exception(
                PayloadTooLargeError(
                    f"request {rid!r}: command is {len(value)} bytes, Kafka takes at most "
                    f"{MAX_RECORD_BYTES}",
                    code="COMMAND_TOO_LARGE",
                )
            )
            return future
        now = time.monotonic()
        with self._lock:
            pending = self._pending.get(rid)
            if pending is not None:
                return pending.future  # the same request is already on its way
            self._pending[rid] = _Pending(
                future, session_id, now, now + (timeout or self.timeout), single
            )
        headers = command_headers(rid)
        if self._tenant is not None:
            headers += tenant_headers(*self._tenant, value)

        while True:
            try:
                self._producer.produce(
                    self._commands,
                    value=value,
                    key=session_id.encode(),
                    headers=headers,
                )
                return future
            except BufferError:
                self._producer.poll(0.01)  # the local queue is full: let deliveries drain
            except KafkaException as exc:
                with self._lock:
                    self._pending.pop(rid, None)
                future.set_exception(
                    WriterUnavailableError(f"request {rid!r} not sent: {exc.args[0].str()}")
                )
                return future

    def _undelivered(self, err: KafkaError | None, msg: Message) -> None:
        """Delivery reports come for failures only (``delivery.report.only.error``)."""
        if err is None:
            return
        request_id = header(msg.headers(), HEADER_REQUEST) or ""
        with self._lock:
            pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending.future.set_exception(
                WriterUnavailableError(f"request {request_id!r} not sent: {err.str()}")
            )

    # -- replies --------------------------------------------------------------------------

    def _serve(self) -> None:
        next_expiry_check = 0.0
        while not self._closed.is_set():
            try:
                self._producer.poll(0)
                first = self._replies.poll(0.02)
                if first is not None:
                    for m in [first, *self._replies.consume(1000, 0)]:
                        self._on_reply(m)
            except (KafkaAuthenticationError, KafkaTlsError) as exc:
                # The login was refused (e.g. the credentials were revoked) or the broker's
                # certificate no longer verifies: no reply will come, so every append waiting
                # and every later one fails with it now.
                self._refused = exc
                self._fail_pending(exc)
            except Exception:
                # This thread resolves every future: it must outlive any one bad reply.
                log.exception("serving replies")
            now = time.monotonic()
            if now >= next_expiry_check:
                self._expire(now)
                next_expiry_check = now + 0.05

    def _on_reply(self, m: Message) -> None:
        err = m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("replies consumer: %s", err)
            return
        if m.key() != self._key:
            return  # another client sharing this replies partition
        try:
            reply = decode_reply(m.value() or b"")
        except SessionError as exc:
            log.warning("undecodable reply at offset %s: %s", m.offset(), exc)
            return
        with self._lock:
            pending = self._pending.pop(reply.request_id, None)
        if pending is None:
            return  # a duplicate answer to a retried request, already resolved
        elapsed = time.monotonic() - pending.sent_at
        error = reply.exception()
        if error is not None:
            metrics.round_trip("rejected").observe(elapsed)
            pending.future.set_exception(error)
            return
        metrics.round_trip("committed").observe(elapsed)
        events = [r.to_event() for r in reply.events or ()]
        pending.future.set_result(events[0] if pending.single else events)

    def _fail_pending(self, error: Exception) -> None:
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for p in pending:
            p.future.set_exception(error)

    def _expire(self, now: float) -> None:
        with self._lock:
            expired = [rid for rid, p in self._pending.items() if p.deadline <= now]
            gone = [(rid, self._pending.pop(rid)) for rid in expired]
        for rid, pending in gone:
            metrics.round_trip("timeout").observe(now - pending.sent_at)
            pending.future.set_exception(
                AppendTimeoutError(
                    f"request {rid!r} to session {pending.session_id!r}: no reply in "
                    f"{now - pending.sent_at:.1f}s; retrying with the same request_id is safe",
                    request_id=rid,
                )
            )

    # -- reads ----------------------------------------------------------------------------

    def read(
        self,
        session_id: str,
        timeout: float | None = None,
        interpreters: Mapping[str, Interpreter] | None = None,
    ) -> dsh.Session:
        """The session restored from the events topic, as committed now, with ``interpreters``
        (default: the client's)."""
        return read_session(
            self.settings,
            self._events,
            partition_for(session_id, self._event_partitions),
            session_id,
            timeout or self.timeout,
            self.interpreters if interpreters is None else interpreters,
        )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._thread.join()
        # Refused: nothing queued can go out, and the appends have that error already.
        with contextlib.suppress(KafkaAuthenticationError, KafkaTlsError):
            self._producer.flush(10)
        # Now, not whenever the collector gets to this client: until then its threads would
        # go on connecting to the brokers.
        self._producer.close()
        self._replies.close()
        with self._lock:
            pending = list(self._pending.items())
            self._pending.clear()
        for rid, p in pending:
            p.future.set_exception(
                WriterUnavailableError(f"request {rid!r}: the client closed before its reply")
            )

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
