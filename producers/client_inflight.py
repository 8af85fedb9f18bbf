"""The appends a ``SessionClient`` has sent and not yet had answered, and the one background
thread that answers them.

Each append waits here under its session and request id (the writer keeps request ids per
session, so one id may be in flight to two sessions at once) until the first of: the writer's
reply (read from this client's partition of the replies topic), a failed delivery report, its
deadline, a refused login or certificate, or the client's close.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

import dsh
from dsh.errors import SessionError
from producers import client_metrics as metrics
from producers.errors import AppendTimeoutError, ReplyUndecodableError, WriterUnavailableError
from schemas import (
    HEADER_READ_NEXT,
    HEADER_REQUEST,
    AppendReply,
    created_bare,
    decode_reply_frozen,
    header,
)
from servicekit import kafka_clients
from servicekit.gc_tuning import collector_paused
from servicekit.kafka_errors import KafkaAuthenticationError, KafkaTlsError
from servicekit.partition_reader import high_watermark
from servicekit.settings import KafkaSettings

# The client's logger: these lines are the client's.
log = logging.getLogger("dsh.client")


# What a request's future resolves with: the event ("one"), the events ("many"), the events
# as decoded records ("records"), or for a read, a ReadPart.
Shape = Literal["one", "many", "read", "records"]


class ReadPart(NamedTuple):
    """One reply to a read: events, the seq to ask from next (None: that was all), and the
    session's invariants mode."""

    events: list[dsh.Event]
    following: int | None
    invariants: bool


# (session id, request id): what the writer answers a request under.
RequestKey = tuple[str, str]

# Sessions whose last committed seq a client remembers (the most recently committed to):
# a long-lived client appending to millions of sessions would otherwise keep an entry for
# each for ever. About 150 bytes an entry, 15 MB at most.
COMMITTED_SESSIONS = 100_000


def _resolve(future: Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    """Answer ``future`` unless its waiter cancelled it (an async caller that went away, e.g.
    through ``asyncio.wrap_future``): the answer has no one to go to, and raising here would
    stop the thread that answers every other request."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass


@dataclass
class _Pending:
    future: Future[Any]
    session_id: str
    sent_at: float
    deadline: float
    shape: Shape


class InFlight:
    """Serves until ``closed`` is set; :meth:`close` then fails what is still waiting."""

    # Built after the producer, whose delivery reports come to :meth:`undelivered`.
    _replies: Consumer
    _thread: threading.Thread

    def __init__(
        self, client_id: str, closed: threading.Event, committed_sessions: int = COMMITTED_SESSIONS
    ) -> None:
        self._client_id = client_id
        self._key = client_id.encode()
        self._closed = closed
        self._pending: dict[RequestKey, _Pending] = {}
        self._lock = threading.Lock()
        # The last seq committed to each session by this client (set by the serving thread
        # before the append's future resolves): what a read-your-writes read waits for. Only
        # the ``committed_sessions`` most recently committed to, oldest first.
        self._committed: OrderedDict[str, int] = OrderedDict()
        self._committed_sessions = committed_sessions
        # Set by the serving thread: every append from then on fails with it.
        self.refused: KafkaAuthenticationError | KafkaTlsError | None = None

    def listen(self, settings: KafkaSettings, replies: str, partition: int) -> None:
        """Read this client's replies partition from its current end: every reply for this
        (new) client id comes later."""
        self._replies = kafka_clients.tail_reader(settings)
        try:
            end = high_watermark(self._replies, replies, partition)
            self._replies.assign([TopicPartition(replies, partition, end)])
        except BaseException:
            # The error's traceback holds this half-built client: without a close its
            # consumer would live on in it, fetching and logging.
            self._replies.close()
            raise

    def start(self, producer: Producer) -> None:
        """Serve ``producer``'s delivery reports, the replies and the deadlines."""
        self._thread = threading.Thread(
            target=self._serve, args=(producer,), name=f"dsh-client-{self._client_id}", daemon=True
        )
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def close(self) -> None:
        """After :meth:`join`: stop reading replies and fail every append still waiting."""
        self._replies.close()
        for (_, rid), p in self._take_all():
            _resolve(
                p.future,
                error=WriterUnavailableError(
                    f"request {rid!r}: the client closed before its reply"
                ),
            )

    # -- requests -------------------------------------------------------------------------

    def add(
        self, rid: str, future: Future[Any], session_id: str, timeout: float, shape: Shape
    ) -> Future[Any] | None:
        """Wait for ``rid``'s reply; the earlier future if the same request to the same session
        is already on its way (then ``future`` is not used)."""
        now = time.monotonic()
        key = (session_id, rid)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None:
                return pending.future
            self._pending[key] = _Pending(future, session_id, now, now + timeout, shape)
        return None

    def committed_seq(self, session_id: str) -> int | None:
        """The last seq this client had committed to the session; None if none, or if
        :data:`COMMITTED_SESSIONS` other sessions were committed to since."""
        with self._lock:
            return self._committed.get(session_id)

    def _note_committed(self, session_id: str, seq: int) -> None:
        committed = self._committed
        with self._lock:
            # A reply to a retried request may name an earlier seq than one answered since.
            committed[session_id] = max(seq, committed.get(session_id, -1))
            committed.move_to_end(session_id)
            while len(committed) > self._committed_sessions:
                committed.popitem(last=False)

    def discard(self, session_id: str, rid: str) -> None:
        """``rid`` was not sent: its caller resolves it."""
        with self._lock:
            self._pending.pop((session_id, rid), None)

    def undelivered(self, err: KafkaError | None, msg: Message) -> None:
        """Delivery reports come for failures only (``delivery.report.only.error``)."""
        if err is None:
            return
        request_id = header(msg.headers(), HEADER_REQUEST) or ""
        session_id = (msg.key() or b"").decode(errors="replace")  # commands are keyed by it
        with self._lock:
            pending = self._pending.pop((session_id, request_id), None)
        if pending is not None:
            _resolve(
                pending.future,
                error=WriterUnavailableError(f"request {request_id!r} not sent: {err.str()}"),
            )

    # -- the serving thread ---------------------------------------------------------------

    def _serve(self, producer: Producer) -> None:
        next_expiry_check = 0.0
        while not self._closed.is_set():
            try:
                producer.poll(0)
                first = self._replies.poll(0.02)
                if first is not None:
                    for m in [first, *self._replies.consume(1000, 0)]:
                        # A read's reply is up to 512 KiB of events, all kept: decoded without
                        # the collector rescanning them (and the caller's heap) as they pile up.
                        with collector_paused():
                            self._on_reply(m)
            except (KafkaAuthenticationError, KafkaTlsError) as exc:
                # The login was refused (e.g. the credentials were revoked) or the broker's
                # certificate no longer verifies: no reply will come, so every append waiting
                # and every later one fails with it now.
                self.refused = exc
                for _key, p in self._take_all():
                    _resolve(p.future, error=exc)
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
            reply = decode_reply_frozen(m.value() or b"")
        except SessionError as exc:
            log.warning("undecodable reply at offset %s: %s", m.offset(), exc)
            return
        with self._lock:
            pending = self._pending.pop((reply.session_id, reply.request_id), None)
        if pending is None:
            return  # a duplicate answer to a retried request, already resolved
        try:
            self._answer(m, reply, pending)
        except Exception as exc:
            # Taken out of the table, the request has no deadline any more: unless resolved
            # here, its caller would wait for ever.
            log.error(
                "reply to request %r of session %r at offset %s could not be read",
                reply.request_id,
                reply.session_id,
                m.offset(),
                exc_info=exc,
            )
            _resolve(
                pending.future,
                error=ReplyUndecodableError(
                    f"request {reply.request_id!r} to session {reply.session_id!r}: its reply "
                    f"at offset {m.offset()} could not be read ({type(exc).__name__}: {exc}); "
                    "it may have committed: read the session to know"
                ),
            )

    def _answer(self, m: Message, reply: AppendReply, pending: _Pending) -> None:
        elapsed = time.monotonic() - pending.sent_at
        error = reply.exception()
        if error is not None:
            if pending.shape != "read":
                metrics.round_trip("rejected").observe(elapsed)
            _resolve(pending.future, error=error)
            return
        if pending.shape == "records":
            records = reply.events or ()
            metrics.round_trip("committed").observe(elapsed)
            if records:
                self._note_committed(pending.session_id, records[-1].event["seq"])
            _resolve(pending.future, list(records))
            return
        events = [r.to_event() for r in reply.events or ()]
        if pending.shape == "read":
            headers = m.headers()
            following = header(headers, HEADER_READ_NEXT)
            _resolve(
                pending.future,
                ReadPart(
                    events,
                    None if following is None else int(following),
                    not created_bare(headers),
                ),
            )
            return
        metrics.round_trip("committed").observe(elapsed)
        if events:
            self._note_committed(pending.session_id, events[-1].seq)
        _resolve(pending.future, events[0] if pending.shape == "one" else events)

    def _take_all(self) -> list[tuple[RequestKey, _Pending]]:
        with self._lock:
            pending = list(self._pending.items())
            self._pending.clear()
        return pending

    def _expire(self, now: float) -> None:
        with self._lock:
            expired = [key for key, p in self._pending.items() if p.deadline <= now]
            gone = [(key, self._pending.pop(key)) for key in expired]
        for (_, rid), pending in gone:
            metrics.round_trip("timeout").observe(now - pending.sent_at)
            _resolve(
                pending.future,
                error=AppendTimeoutError(
                    f"request {rid!r} to session {pending.session_id!r}: no reply in "
                    f"{now - pending.sent_at:.1f}s; retrying with the same request_id is safe",
                    request_id=rid,
                ),
            )
