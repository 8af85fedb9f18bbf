"""``SessionClient``: append to sessions through the writer, and read them back.

Commands go to the commands topic keyed by session id (Kafka's default partitioner, so the
writer owning that partition gets them in submission order). Each reply comes back on this
client's partition of the replies topic, inside the writer's transaction, so a future resolves
only with events that are committed. One background thread serves delivery reports, replies
and timeouts (``producers.client_inflight``).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from pydantic import SecretStr

import dsh
from dsh.drafts import check_draft
from dsh.errors import SessionError, ValidationError
from dsh.projections import Interpreter
from dsh.restore import restore
from producers.client_inflight import InFlight, ReadPart, Shape
from producers.errors import PayloadTooLargeError, WriterUnavailableError
from producers.read_models import ReadModels
from producers.session_reader import read_session
from producers.tenancy import tenant_headers
from schemas import (
    APPEND_COMMAND,
    HEADER_READ_FROM,
    HEADER_REQUEST,
    AppendCommand,
    EventRecord,
    UnencodableError,
    draft,
    encode_command,
    invariants_header,
    record_headers,
)
from servicekit import kafka_clients
from servicekit.kafka_clients import MAX_RECORD_BYTES
from servicekit.kafka_errors import KafkaAuthenticationError, KafkaTlsError
from servicekit.partitioning import partition_for
from servicekit.settings import ConfigError, KafkaSettings
from servicekit.topics import partition_counts

# Longer than any append should wait before it is even sent.
MAX_LINGER_MS = 1000.0
# Topics created a moment ago may not be in every broker's metadata yet.
_TOPICS_APPEAR_S = 5.0

Draft = Mapping[str, Any]


def command_headers(request_id: str) -> list[tuple[str, str | bytes | None]]:
    """The headers of an append command's record (a tenant's credential comes on top)."""
    return [*record_headers(APPEND_COMMAND), (HEADER_REQUEST, request_id.encode())]


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
        linger_ms: float = 0.0,
        interpreters: Mapping[str, Interpreter] | None = None,
        views: ReadModels | None = None,
        wait_for_room: bool = True,
    ) -> None:
        """``tenant``/``tenant_key``: the credential a writer with tenant prefixes checks.

        ``views``: the read models :meth:`surface`, :meth:`transcript` and :meth:`audit` read
        (``projectors.views.Views`` over the projectors' Redis).

        ``interpreters``: the message-projection interpreters :meth:`read` restores sessions
        with (a session that logged a projection event restores only with its interpreter).

        ``linger_ms``: how long a command may wait in the client so that commands sent close
        together reach the broker in one request. Each request costs the broker CPU; a
        client sending hundreds of appends per second spares it a request per command with a
        few ms (5 ms at 1,000 appends/s; docs/operations.md, "Tuning"), at the cost of up to
        that long on each append. The default, 0, sends at once: an application appending
        one event at a time pays no wait (1 ms of linger made its round trip's p50 about 0.9 ms
        longer, docs/benchmarks.md), and under load librdkafka still batches what queues while
        a request is in flight.

        ``wait_for_room``: when librdkafka's local queue of unsent commands is full (the
        brokers are out of reach), an append waits for room until its timeout (True), or
        fails at once (False: for a caller on an event loop, which must not wait)."""
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
        self._wait_for_room = wait_for_room
        self.interpreters = dict(interpreters or {})
        self.views = views
        self._commands = settings.topic("commands")
        self._events = settings.topic("events")
        replies = settings.topic("replies")
        counts = partition_counts(
            settings, [self._commands, self._events, replies], appear_s=_TOPICS_APPEAR_S
        )
        self._event_partitions = counts[self._events]
        # Request ids only need to be unique per session: a random prefix per client and a
        # counter, instead of a uuid4 (an urandom call) per append.
        self._request_prefix = f"{uuid.uuid4().hex[:16]}-"
        self._request_numbers = itertools.count()
        self._closed = threading.Event()
        self._inflight = InFlight(self.client_id, self._closed)
        self._producer = kafka_clients.producer(
            settings,
            **{
                "enable.idempotence": True,  # keeps per-session order across retries
                "linger.ms": linger_ms,
                # Success is learnt from the writer's reply; a report per record would only
                # cost a Python callback each.
                "delivery.report.only.error": True,
                "on_delivery": self._inflight.undelivered,
            },
        )
        self._inflight.listen(settings, replies, partition_for(self.client_id, counts[replies]))
        self._inflight.start(self._producer)

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
        invariants: bool | None = None,
    ) -> dsh.Event:
        """The committed event, or the writer's rejection as the core's own error class.
        ``AppendTimeoutError``: unknown outcome, retry with the same ``request_id``;
        ``ReplyUndecodableError``: unknown outcome too, the reply could not be read.
        ``invariants``: the turn-invariants mode the append creates its session with (None:
        on); for a session that exists, the mode it must have (else ``InvariantsModeError``):
        a session's mode is fixed when it is created."""
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
            invariants=invariants,
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
        invariants: bool | None = None,
    ) -> Future[dsh.Event]:
        d = draft(
            type,
            data,
            surface_op=surface_op,
            source_event_seqs=source_event_seqs,
            ignorable=ignorable,
        )
        return self._submit(
            session_id, [d], expected_seq, request_id, timeout, shape="one", invariants=invariants
        )

    def append_many(
        self,
        session_id: str,
        drafts: Iterable[Draft],
        *,
        expected_seq: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
        invariants: bool | None = None,
    ) -> list[dsh.Event]:
        """Append several events all-or-nothing (drafts from ``schemas.draft``);
        ``invariants`` as in :meth:`append`."""
        future = self.append_many_async(
            session_id,
            drafts,
            expected_seq=expected_seq,
            request_id=request_id,
            timeout=timeout,
            invariants=invariants,
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
        invariants: bool | None = None,
    ) -> Future[list[dsh.Event]]:
        return self._submit(
            session_id,
            [dict(d) for d in drafts],
            expected_seq,
            request_id,
            timeout,
            shape="many",
            invariants=invariants,
        )

    def _submit(
        self,
        session_id: str,
        drafts: list[dict[str, Any]],
        expected_seq: int | None,
        request_id: str | None,
        timeout: float | None,
        *,
        shape: Shape,
        read_from: int | None = None,
        invariants: bool | None = None,
    ) -> Future[Any]:
        """Send one command; ``read_from``: a read of the session from that seq (no drafts);
        ``invariants``: the mode it creates (or expects) its session with."""
        future: Future[Any] = Future()
        refused = self._refusal()
        if refused is not None:
            future.set_exception(refused)
            return future
        rid = request_id or f"{self._request_prefix}{next(self._request_numbers)}"
        try:
            value = encode_command(
                AppendCommand(rid, self.client_id, session_id, tuple(drafts), expected_seq)
            )
        except SessionError as exc:
            future.set_exception(_as_the_core_would(exc, drafts))
            return future
        return self._send(
            future,
            session_id,
            value,
            rid,
            timeout,
            shape,
            read_from=read_from,
            invariants=invariants,
        )

    def _refusal(self) -> SessionError | None:
        """Why no command can be sent now: the client is closed, or its login was refused."""
        if self._closed.is_set():
            return WriterUnavailableError("the client is closed")
        return self._inflight.refused

    def append_encoded_async(
        self,
        session_id: str,
        value: bytes,
        request_id: str,
        *,
        timeout: float | None = None,
        invariants: bool | None = None,
    ) -> Future[list[EventRecord]]:
        """Send an append command encoded beforehand (``schemas.encode_command`` with this
        client's ``client_id`` and ``request_id``), answered as :meth:`append_many_async` is
        but with the committed events as the reply decoded them (``schemas.EventRecord``), not
        copied into ``dsh.Event``s: for a caller that checks or keeps the encoded commands
        itself and only looks at the seqs it got (``dsh import``)."""
        future: Future[Any] = Future()
        refused = self._refusal()
        if refused is not None:
            future.set_exception(refused)
            return future
        return self._send(
            future, session_id, value, request_id, timeout, "records", None, invariants
        )

    def _send(
        self,
        future: Future[Any],
        session_id: str,
        value: bytes,
        rid: str,
        timeout: float | None,
        shape: Shape,
        read_from: int | None = None,
        invariants: bool | None = None,
    ) -> Future[Any]:
        if len(value) > MAX_RECORD_BYTES:
            future.set_exception(
                PayloadTooLargeError(
                    f"request {rid!r}: command is {len(value)} bytes, Kafka takes at most "
                    f"{MAX_RECORD_BYTES}",
                    code="COMMAND_TOO_LARGE",
                )
            )
            return future
        earlier = self._inflight.add(rid, future, session_id, timeout or self.timeout, shape)
        if earlier is not None:
            return earlier  # the same request is already on its way
        headers = command_headers(rid)
        if read_from is not None:
            headers.append((HEADER_READ_FROM, str(read_from).encode()))
        if invariants is not None:
            headers.append(invariants_header(invariants))
        if self._tenant is not None:
            headers += tenant_headers(*self._tenant, value)

        give_up_at: float | None = None  # set at the first full queue: not on every append
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
                now = time.monotonic()
                if give_up_at is None:
                    give_up_at = now + (timeout or self.timeout)
                if not self._wait_for_room or now >= give_up_at:
                    reason = "the client's queue of unsent commands is full"
                    break
                self._producer.poll(0.01)  # let deliveries drain
            except KafkaException as exc:
                reason = exc.args[0].str()
                break
        self._inflight.discard(session_id, rid)
        future.set_exception(WriterUnavailableError(f"request {rid!r} not sent: {reason}"))
        return future

    # -- reads ----------------------------------------------------------------------------

    def read(
        self,
        session_id: str,
        timeout: float | None = None,
        interpreters: Mapping[str, Interpreter] | None = None,
    ) -> dsh.Session:
        """The session as committed now, with ``interpreters`` (default: the client's), from
        the writer that owns it: one round trip per 512 KiB of events, whatever else its
        partition holds. Ordered with the session's appends: it holds every append committed
        before it was asked, this client's and every other service's. An unknown id is an
        empty session."""
        events, invariants = self._read_from(session_id, 0, timeout)
        return restore(
            dsh.Session(session_id, invariants=invariants),
            events,
            self.interpreters if interpreters is None else interpreters,
            mark_end=False,
        )

    def read_events(
        self, session_id: str, from_seq: int = 0, timeout: float | None = None
    ) -> list[dsh.Event]:
        """The session's committed events from seq ``from_seq`` on, as :meth:`read` reads
        them: a session read before is brought up to date with what came since
        (``dsh.restore.restore(session, events, …)`` continues it)."""
        return self._read_from(session_id, from_seq, timeout)[0]

    def _read_from(
        self, session_id: str, from_seq: int, timeout: float | None
    ) -> tuple[list[dsh.Event], bool]:
        """The events from ``from_seq`` on, and the session's invariants mode."""
        events: list[dsh.Event] = []
        start: int | None = from_seq
        invariants = True
        while start is not None:
            future = self._submit(
                session_id, [], None, None, timeout, shape="read", read_from=start
            )
            try:
                part: ReadPart = future.result()
            finally:
                del future  # as in append
            events += part.events
            start, invariants = part.following, part.invariants
        return events, invariants

    def read_log(
        self,
        session_id: str,
        timeout: float | None = None,
        interpreters: Mapping[str, Interpreter] | None = None,
    ) -> dsh.Session:
        """The session restored from the events topic itself, as committed now: for when no
        writer answers (recovery tools; an independent check of the log). It scans the
        session's partition from its start, so it costs every session on that partition."""
        return read_session(
            self.settings,
            self._events,
            partition_for(session_id, self._event_partitions),
            session_id,
            timeout or self.timeout,
            self.interpreters if interpreters is None else interpreters,
        )

    # -- the read models ------------------------------------------------------------------

    def committed_seq(self, session_id: str) -> int | None:
        """The last seq this client has had committed to the session (None: none yet). Kept
        for the 100,000 sessions this client committed to most recently
        (``producers.client_inflight.COMMITTED_SESSIONS``); for one longer ago, None, and a
        read that needs it passes the seq its append returned as ``at_least``."""
        return self._inflight.committed_seq(session_id)

    def surface(
        self, session_id: str, *, at_least: int | None = None, timeout: float | None = None
    ) -> Any:
        """The surface read model (``.messages``: what the model sees next), with at least
        ``at_least`` applied: by default, everything this client appended to the session."""
        return self._views().surface(
            session_id, at_least=self._at_least(session_id, at_least), timeout_s=timeout
        )

    def transcript(
        self, session_id: str, *, at_least: int | None = None, timeout: float | None = None
    ) -> Any:
        """The transcript read model (``.entries``), read as :meth:`surface` is."""
        return self._views().transcript(
            session_id, at_least=self._at_least(session_id, at_least), timeout_s=timeout
        )

    def audit(
        self, session_id: str, *, at_least: int | None = None, timeout: float | None = None
    ) -> Any:
        """The audit read model, read as :meth:`surface` is."""
        return self._views().audit(
            session_id, at_least=self._at_least(session_id, at_least), timeout_s=timeout
        )

    def _views(self) -> ReadModels:
        if self.views is None:
            raise ConfigError(
                "this SessionClient was made without views: pass "
                "views=projectors.views.Views(<the projectors' Redis client>)",
                code="NO_READ_MODELS",
            )
        return self.views

    def _at_least(self, session_id: str, at_least: int | None) -> int | None:
        return self.committed_seq(session_id) if at_least is None else at_least

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._inflight.join()
        # Refused: nothing queued can go out, and the appends have that error already.
        with contextlib.suppress(KafkaAuthenticationError, KafkaTlsError):
            self._producer.flush(10)
        # Now, not whenever the collector gets to this client: until then its threads would
        # go on connecting to the brokers.
        self._producer.close()
        self._inflight.close()

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _as_the_core_would(exc: SessionError, drafts: Sequence[Mapping[str, Any]]) -> SessionError:
    """A draft the codec cannot encode, as the error the core raises for it: data that is not
    lossless JSON is the core's ``ValidationError`` (a client raises what the core would),
    not the codec's."""
    if not isinstance(exc, UnencodableError):
        return exc
    for d in drafts:
        try:
            check_draft(d.get("type"), d.get("data"), d.get("surfaceOp"), d.get("sourceEventSeqs"))
        except ValidationError as core:
            return core
    return exc
