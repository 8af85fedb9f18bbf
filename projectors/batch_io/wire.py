"""A batch on one node's connection: packed by hiredis, written at once, its replies read later
(straight from redis-py's hiredis reader when it has one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hiredis
from redis.connection import ConnectionPool

from projectors.batch_io.seam import Command
from projectors.link import read_replies


class Flight:
    """Commands written on one connection whose replies are not read yet."""

    def __init__(self, pool: ConnectionPool, conn: Any, count: int) -> None:
        self.pool, self.conn, self.count = pool, conn, count

    @classmethod
    def send(cls, pool: ConnectionPool, commands: Sequence[Command]) -> Flight:
        conn = pool.get_connection()
        try:
            packed = [b"".join(map(hiredis.pack_command, commands))]
            conn.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)
            raise
        return cls(pool, conn, len(commands))

    def read(self) -> list[Any]:
        conn = self.conn
        try:
            return read_replies(conn, self.count)
        except BaseException:
            conn.disconnect()  # replies may be left unread
            raise
        finally:
            self.pool.release(conn)

    def drop(self) -> None:
        self.conn.disconnect()
        self.pool.release(self.conn)


class Done:
    """A batch with nothing left to read (an empty one)."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies

    def result(self) -> list[Any]:
        return self.replies

    def cancel(self) -> None:
        pass
