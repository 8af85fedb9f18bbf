"""Many open transcript streams on one session, read by one asyncio loop: when each entry
reached each stream. A plain HTTP/1.1 client on asyncio's streams (one connection a tail,
the chunked body decoded by hand), so a thousand tails cost this process little."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Tail:
    """One open stream: each seq it received, with ``time.monotonic()`` on arrival."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    arrivals: dict[int, float] = field(default_factory=dict)


async def open_tail(url: str, after: int) -> Tail:
    """``GET url`` with ``Last-Event-ID: after``, once its answer's headers (200) came."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(
        f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n"
        f"Last-Event-ID: {after}\r\n\r\n".encode()
    )
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        writer.close()
        raise RuntimeError(f"stream refused: {status.decode().strip()}")
    while await reader.readline() not in (b"\r\n", b""):
        pass  # the headers
    return Tail(reader, writer)


async def follow(tail: Tail, last_seq: int) -> None:
    """Reads ``tail``'s frames until ``last_seq`` arrived (the body is chunked: a size line,
    that many bytes, CRLF; the server writes each SSE frame as one chunk)."""
    buffer = b""
    while last_seq not in tail.arrivals:
        size = int((await tail.reader.readline()).strip() or b"0", 16)
        if size == 0:
            return  # the stream ended
        buffer += (await tail.reader.readexactly(size + 2))[:-2]
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            arrived = time.monotonic()
            for line in frame.split(b"\n"):
                if line.startswith(b"id: "):
                    tail.arrivals[int(line[4:])] = arrived


async def open_tails(url: str, after: int, count: int, at_once: int = 50) -> list[Tail]:
    """``count`` streams, at most ``at_once`` of them connecting at a time."""
    gate = asyncio.Semaphore(at_once)

    async def one() -> Tail:
        async with gate:
            return await open_tail(url, after)

    return list(await asyncio.gather(*(one() for _ in range(count))))


def close(tails: list[Tail]) -> None:
    for tail in tails:
        tail.writer.close()
