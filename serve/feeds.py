"""One follow of each streamed session, shared by all its open streams.

A stream used to follow the transcript on a worker thread of its own, so every append woke
each open stream of the session to read Redis and encode the entry: with 1,000 streams, the
last one got the entry close to a second after the append. Now one thread per streamed session
follows it (``projectors.views.follow``) and hands each new entry to every stream's queue in
the event loop; a stream only reads Redis for the entries before it joined.

A stream joins its session's feed first, waits until the feed knows where it starts (the
transcript's last entry then), and only then reads the history after its ``after``: nothing
falls between the two, and what arrives twice is dropped by seq. A feed ends when its last
stream has left (at its next idle second), or when the session is blocked (each stream then
ends with the reason), or when Redis fails (the streams end; a client resumes with
``Last-Event-ID``). A stream whose client reads slower than entries come is ended the same
way once ``QUEUE_LIMIT`` entries wait for it, rather than holding them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from dsh.errors import SessionError
from projectors.read_api import Reader, TranscriptEntry
from projectors.views import follow

log = logging.getLogger("serve")

QUEUE_LIMIT = 10_000  # entries waiting for one stream
# How long the last stream to leave a feed waits for it to end: its idle second, and a Redis
# call that is slow to answer. Past that the stream's slot comes back anyway (bounded).
END_WAIT_S = 5.0


@dataclass(eq=False)
class Subscriber:
    """One open stream: what the feed handed it, in order."""

    queue: asyncio.Queue[TranscriptEntry | BaseException | None] = field(
        default_factory=lambda: asyncio.Queue(QUEUE_LIMIT)
    )
    overflowed: bool = False

    def offer(self, item: TranscriptEntry | BaseException | None) -> None:
        """In the event loop: queue ``item``, or mark the stream as fallen behind."""
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.overflowed = True


class _Feed:
    def __init__(self, feeds: Feeds, session_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.feeds, self.session_id, self.loop = feeds, session_id, loop
        self.subscribers: set[Subscriber] = set()
        # Set in the loop once the feed has read where it starts (or failed to): a stream
        # that read its history before then could miss the entries between the two.
        self.positioned = asyncio.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"feed-{session_id[:40]}", daemon=True
        )

    def _run(self) -> None:
        reader = self.feeds.reader
        try:
            try:
                start = self._last_seq(reader)
            finally:
                self._positioned()
            for entry in follow(reader, self.session_id, start):
                subscribers = self._subscribers()
                if subscribers is None:
                    return
                # None each idle second: the streams send a keep-alive then.
                if not self._offer(subscribers, entry):
                    return
        except Exception as exc:  # blocked (SessionBlockedError), or Redis failed
            if not isinstance(exc, SessionError):
                log.warning("transcript feed of %s ended: %r", self.session_id, exc)
            self._offer(self._end(), exc)

    def _positioned(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: no stream waits
            self.loop.call_soon_threadsafe(self.positioned.set)

    def _offer(
        self, subscribers: list[Subscriber], item: TranscriptEntry | Exception | None
    ) -> bool:
        """Hand ``item`` to each stream in the event loop; False if the loop is closed (the
        server stopped, and its streams with it): the feed ends."""
        try:
            for subscriber in subscribers:
                self.loop.call_soon_threadsafe(subscriber.offer, item)
        except RuntimeError:
            self._end()
            return False
        return True

    def _last_seq(self, reader: Reader) -> int:
        """The seq of the transcript's last entry now (-1: none): where the feed starts."""
        key = reader.keys.session(self.session_id, "transcript")
        last: Any = reader.client.xrevrange(key, "+", "-", count=1)
        if not last:
            return -1
        entry_key = last[0][0]
        text = entry_key.decode() if isinstance(entry_key, bytes) else entry_key
        return int(text.split("-", 1)[0])

    def _subscribers(self) -> list[Subscriber] | None:
        """The streams to hand the next entry to; None once the last one left, and then the
        feed is gone (under the lock a stream joins by: the next stream starts a new one)."""
        with self.feeds.lock:
            if self.subscribers:
                return list(self.subscribers)
            self._close()
            return None

    def _end(self) -> list[Subscriber]:
        with self.feeds.lock:
            self._close()
            return list(self.subscribers)

    def _close(self) -> None:
        if self.feeds.open.get(self.session_id) is self:
            del self.feeds.open[self.session_id]


class Feeds:
    """The feeds of one app: made by its lifespan, with the reader the streams use."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.lock = threading.Lock()
        self.open: dict[str, _Feed] = {}

    async def settled(self, session_id: str) -> None:
        """After a stream of ``session_id`` left: until its feed, if no stream is left on it,
        has ended (at its idle second) or another stream has joined it. A feed holds a Redis
        connection until then, so a stream gives its slot back (``serve.stream``) only after
        this: feeds never outnumber the slots, and the Redis pool sized for them
        (``serve.app.redis_connections``) cannot run dry however fast streams reconnect to
        other sessions."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + END_WAIT_S
        with self.lock:
            feed = self.open.get(session_id)
        if feed is None:
            return
        # The feed leaves ``open`` just before its thread returns: wait for the thread to return,
        # not for the feed to leave ``open``.
        while loop.time() < deadline:
            with self.lock:
                if feed.subscribers or not feed.thread.is_alive():
                    return
            await asyncio.sleep(0.05)

    @asynccontextmanager
    async def joined(self, session_id: str) -> AsyncIterator[Subscriber]:
        """A stream of ``session_id`` for the duration of the block: every entry the session's
        feed sees from now on arrives in its queue, None each idle second, and the feed's end
        as an exception (``SessionBlockedError``, or what Redis raised)."""
        subscriber = Subscriber()
        with self.lock:
            feed = self.open.get(session_id)
            start = feed is None
            if feed is None:
                feed = self.open[session_id] = _Feed(self, session_id, asyncio.get_running_loop())
            feed.subscribers.add(subscriber)
        if start:
            feed.thread.start()
        try:
            await feed.positioned.wait()
            yield subscriber
        finally:
            with self.lock:
                feed.subscribers.discard(subscriber)
