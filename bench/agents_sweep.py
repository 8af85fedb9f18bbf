"""The Agents SDK benchmark's length sweep: what each SDK call costs as the session grows.

At each length (0, 1,000, 5,000, 10,000 messages by default) a backend's session is filled
with ``add_items`` of 100 items at a time (untimed), then ``--calls`` rounds are timed, each
``add_items`` of two ~1 KiB items, ``get_items(limit=2)`` and ``pop_item()``, plus a few
``get_items()`` of everything, which returns the whole session and so cannot be flat.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

OPS = ("add_items", "get_items(limit=2)", "pop_item")
FILL_CHUNK = 100  # items per untimed add_items while filling
FULL_READS = 3  # get_items() of everything per length: it returns the session, so few


def turn_items(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A user input and an assistant output message, as the SDK adds them (about 1 KiB)."""
    text = f"turn {n}: " + "words of a plausible length " * 36
    user = {"role": "user", "content": text}
    assistant = {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return user, assistant


async def _timed(call: Callable[..., Awaitable[Any]], *args: Any) -> float:
    t0 = time.perf_counter()
    await call(*args)
    return time.perf_counter() - t0


async def sweep(session: Any, lengths: Sequence[int], calls: int) -> dict[int, dict[str, float]]:
    """Median ms per call of each op at each length of ``session`` (empty at the start)."""
    out: dict[int, dict[str, float]] = {}
    size = 0  # messages added so far (pops leave the net count at +1 per round)
    n = 0
    for length in lengths:
        while size < length:
            chunk: list[Any] = []
            while len(chunk) < min(FILL_CHUNK, length - size):
                chunk.extend(turn_items(n))
                n += 1
            await session.add_items(chunk)
            size += len(chunk)
        samples: dict[str, list[float]] = {op: [] for op in (*OPS, "get_items()")}
        for _ in range(calls):
            user, assistant = turn_items(n)
            n += 1
            samples["add_items"].append(await _timed(session.add_items, [user, assistant]))
            samples["get_items(limit=2)"].append(await _timed(session.get_items, 2))
            samples["pop_item"].append(await _timed(session.pop_item))
            size += 1
        for _ in range(FULL_READS):
            samples["get_items()"].append(await _timed(session.get_items))
        out[length] = {op: round(statistics.median(v) * 1000, 2) for op, v in samples.items()}
    return out


def growth(row: dict[int, dict[str, float]]) -> dict[str, float]:
    """Each op's median at the longest length ÷ at the shortest."""
    first, last = row[min(row)], row[max(row)]
    return {op: round(last[op] / first[op], 2) for op in first if first[op]}


def print_sweep(rows: dict[str, dict[int, dict[str, float]]]) -> None:
    ops = (*OPS, "get_items()")
    print("per-call medians (ms) by session length (messages)")
    for name, row in rows.items():
        print(f"  {name}")
        for length, figures in row.items():
            cells = "  ".join(f"{op} {figures[op]:8.2f}" for op in ops)
            print(f"    {length:>6}: {cells}")
        ratios = growth(row)
        print("    longest ÷ start: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
