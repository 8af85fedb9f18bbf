"""The projectors' Redis I/O in two phases: submit a batch of commands now, read its replies later.

A projector sends batch N+1 before it reads batch N's replies, so Redis runs N's scripts while
Python decodes and plans N+1. Everything goes over one connection, so Redis executes the
batches in the order they were submitted and replies come back in that order; a handle's
``result()`` first reads (and keeps) the replies of every batch submitted before it.

This is the one seam between the runtime and Redis for applying and rebuilding: a
cluster-aware link (one connection per node, commands routed by hash slot) offers the same
``submit`` / ``result`` / ``reset``.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH_DATA
from redis._parsers.hiredis import _HiredisParser

Command = tuple[Any, ...]


class Pending:
    """The replies of one submitted batch, in order; a failed command's reply is its
    ResponseError. ``result()`` raises ConnectionError / TimeoutError when the connection broke
    before every reply was read: then nothing is known about what Redis applied; and
    :class:`WritesRefusedError` when Redis refused a write for a state of its own."""

    __slots__ = ("_error", "_link", "_n", "_replies")

    def __init__(self, link: RedisLink | None, n: int) -> None:
        self._link = link
        self._n = n
        self._replies: list[Any] | None = None if n else []
        self._error: BaseException | None = None

    @classmethod
    def finished(cls, replies: list[Any]) -> Pending:
        """A pending whose replies are already read."""
        pending = cls(None, 0)
        pending._replies = replies
        return pending

    def cancel(self) -> None:
        """Give up on the replies: the link's connection is dropped (it would be out of step),
        failing every batch still unread on it."""
        if not self.done and self._link is not None:
            self._link.reset()

    @property
    def done(self) -> bool:
        return self._replies is not None or self._error is not None

    def result(self) -> list[Any]:
        if not self.done:
            assert self._link is not None
            self._link._read_through(self)
        if self._error is not None:
            raise self._error
        assert self._replies is not None
        return self._replies


class RedisLink:
    """One connection of ``client``'s pool, kept for the link's lifetime."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._conn: Any = None
        self._outstanding: deque[Pending] = deque()

    def submit(self, commands: Sequence[Command]) -> Pending:
        """Send the commands in one write, packed by hiredis (redis-py's pipeline encodes each
        argument in Python, which cost more per event than everything else on the Redis side)."""
        if not commands:
            return Pending(None, 0)
        conn = self._connection()
        try:
            packed = b"".join(map(hiredis.pack_command, commands))
            conn.send_packed_command([packed], check_health=False)
        except BaseException as exc:
            self._fail(exc)
            raise
        pending = Pending(self, len(commands))
        self._outstanding.append(pending)
        return pending

    def round_trip(self, commands: Sequence[Command]) -> list[Any]:
        return self.submit(commands).result()

    def reset(self) -> None:
        """Forget the connection and every unread reply (they fail with ConnectionError)."""
        self._fail(redis.ConnectionError("the Redis link was reset"))

    def close(self) -> None:
        self.reset()

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self.client.connection_pool.get_connection()
        return self._conn

    def _read_through(self, target: Pending) -> None:
        try:
            while self._outstanding:
                pending = self._outstanding[0]
                pending._replies = self._read(pending._n)
                self._outstanding.popleft()
                if pending is target:
                    return
        except BaseException as exc:
            self._fail(exc)
            raise
        raise AssertionError("a pending batch of another connection")

    def _fail(self, exc: BaseException) -> None:
        """Replies may be left unread: the connection is out of step, drop it."""
        for pending in self._outstanding:
            pending._error = exc
        self._outstanding.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.disconnect()
            self.client.connection_pool.release(conn)

    def _read(self, n: int) -> list[Any]:
        return read_replies(self._conn, n)


class WritesRefusedError(redis.ResponseError):
    """Redis answered but refused the batch's writes for a state of its own, not of the data:
    memory full (``OOM``), persistence failing (``MISCONF``), too few replicas
    (``NOREPLICAS``), a script running too long (``BUSY``), an ACL (``NOPERM``). Nothing about
    the session is wrong, so it is no gap to rebuild: the batch goes again, uncommitted, until
    Redis takes it (the projector loop retries it; readiness says why meanwhile)."""

    def __init__(self, code: str, reply: redis.ResponseError) -> None:
        super().__init__(f"Redis refused the batch's writes ({code}): {reply}")
        self.code = code


# What Redis refuses writes with while the fault is its own and passes (or an operator fixes
# it); READONLY (a replica) is a lost primary, read as a lost connection (:func:`_demoted`).
# Each with what an operator does about it (the CLI names it when a command is refused).
REFUSAL_FIXES = {
    "OOM": "Redis is at its maxmemory: free memory or raise maxmemory",
    "MISCONF": "Redis cannot save to its disk: fix its dir or disk, or its save setting",
    "NOREPLICAS": "fewer replicas answer Redis than its min-replicas-to-write",
    "BUSY": "a script is running in Redis: wait for it, or SCRIPT KILL it",
    "NOPERM": "the ACL user of DSH_REDIS_URL / DSH_REDIS_USERNAME may not run the command",
}
_REFUSALS = frozenset(REFUSAL_FIXES)
# Redis before 7 reports a write refused inside a script as the script's failure, "ERR Error
# running script (call to f_…): @user_script:1: @user_script: 1: -READONLY You can't write …"
# (Redis 7 keeps the refusal's own code first). A script's own error that merely mentions a
# code does not have this shape.
_SCRIPT_REFUSED = re.compile(
    r"@user_script: ?\d+: -(READONLY|" + "|".join(sorted(_REFUSALS)) + ") "
)


def _refusal(reply: redis.ResponseError) -> str | None:
    """The code of a write Redis refused for a state of its own, or None for a failed command."""
    if isinstance(reply, redis.ReadOnlyError):
        return "READONLY"
    code = getattr(reply, "status_code", None)  # redis-py strips a known code off the message
    if code in _REFUSALS:
        return str(code)
    wrapped = _SCRIPT_REFUSED.search(str(reply))
    return wrapped.group(1) if wrapped else None


def refused(reply: redis.ResponseError) -> redis.RedisError | None:
    """What to raise for a refused write instead of reading it as the command's reply: a
    replica's as a lost connection (the retry asks the Sentinels again), the others as
    :class:`WritesRefusedError`."""
    code = _refusal(reply)
    if code is None:
        return None
    if code == "READONLY":
        return _demoted(reply)
    return WritesRefusedError(code, reply)


def read_replies(conn: Any, n: int) -> list[Any]:
    """The next ``n`` replies on ``conn``; a failed command's reply is its ResponseError.
    Socket timeouts and a closed connection raise redis-py's TimeoutError / ConnectionError; so
    does a write refused by a replica (``READONLY``: the primary was demoted, as redis-py's
    Sentinel connection reads it). A write refused for another state of Redis' own raises
    :class:`WritesRefusedError`; both also when a script's failure wraps the refusal."""
    parser = getattr(conn, "_parser", None)
    if type(parser) is _HiredisParser and parser._reader is not None:
        return _read_from_hiredis(parser, n)
    results: list[Any] = []
    for _ in range(n):
        try:
            results.append(conn.read_response())
        except redis.ResponseError as exc:  # one command failed; the stream stays in step
            error = refused(exc)  # a plain connection's READONLY; a Sentinel's raises as below
            if error is not None:
                raise error from exc
            results.append(exc)
    return results


def _demoted(exc: redis.ResponseError) -> redis.ConnectionError:
    return redis.ConnectionError(f"the primary is now a replica (READONLY {exc})")


def _read_from_hiredis(parser: Any, n: int) -> list[Any]:
    """``n`` replies straight from redis-py's hiredis reader: what ``Connection.read_response``
    does per reply, without its per-call layers (a few µs an event). Error replies come back as
    the same ResponseError instances (hiredis builds them with redis-py's ``parse_error``)."""
    gets, fill = parser._reader.gets, parser.read_from_socket
    results: list[Any] = []
    append = results.append
    for _ in range(n):
        reply = gets()
        while reply is _NOT_ENOUGH_DATA:
            try:
                fill()
            except OSError as exc:  # reset, broken pipe: what read_response raises for them
                raise redis.ConnectionError(f"Error while reading from Redis: {exc}") from exc
            reply = gets()
        if isinstance(reply, redis.ConnectionError):  # e.g. LOADING: as read_response raises
            raise reply
        if isinstance(reply, redis.ResponseError):
            error = refused(reply)
            if error is not None:
                raise error from reply  # the link drops the connection: replies are left unread
        append(reply)
    return results


def raise_errors(replies: Sequence[Any]) -> None:
    """Raise the first error among replies, also one inside a transaction's EXEC reply."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, list):
            for inner in reply:
                if isinstance(inner, Exception):
                    raise inner
