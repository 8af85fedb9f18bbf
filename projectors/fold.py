"""Rebuilds write a session's final keys, not every event's ops.

A rebuild plans every event as the live path does, then folds the planned ops in memory into
what the keys will hold (the same meaning ``lua/apply.lua`` gives them) and writes that with
a handful of bulk commands: one script call per event would cost more than the planning.
``dsh verify`` and the replay tests check the result against the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projectors.projection import Op

_CHUNK = 1000  # fields or items per command: bounded argument lists


class Image:
    """The contents of one session's keys of one projection, built from planned ops."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = list(keys)
        self.hashes: dict[int, dict[str, str]] = {}
        self.lists: dict[int, list[str]] = {}
        self.streams: dict[int, list[tuple[str, list[str]]]] = {}
        self.applied = -1

    def apply(self, seq: int, ops: Sequence[Op]) -> None:
        i, n = 0, len(ops)
        while i < n:
            op, k = ops[i], int(ops[i + 1])
            if op == "H":
                self.hashes.setdefault(k, {})[str(ops[i + 2])] = str(ops[i + 3])
                i += 4
            elif op == "D":
                self.hashes.setdefault(k, {}).pop(str(ops[i + 2]), None)
                i += 3
            elif op == "A":
                h = self.hashes.setdefault(k, {})
                field, value = str(ops[i + 2]), str(ops[i + 3])
                h[field] = f"{h[field]},{value}" if field in h else value
                i += 4
            elif op == "R":
                self.lists.setdefault(k, []).append(str(ops[i + 2]))
                i += 3
            elif op == "L":
                items = self.lists.setdefault(k, [])
                first, last = items.index(str(ops[i + 2])), items.index(str(ops[i + 3]))
                items[first : last + 1] = [str(ops[i + 4])]
                i += 5
            elif op == "X":
                count = int(ops[i + 3])
                fields = [str(f) for f in ops[i + 4 : i + 4 + 2 * count]]
                self.streams.setdefault(k, []).append((str(ops[i + 2]), fields))
                i += 4 + 2 * count
            else:
                raise ValueError(f"unknown op {op!r}")
        self.applied = seq

    def commands(self) -> list[tuple[Any, ...]]:
        """Commands that make Redis hold this image (after the keys were deleted)."""
        out: list[tuple[Any, ...]] = []
        meta = self.hashes.setdefault(1, {})
        if self.applied >= 0:
            meta["applied"] = str(self.applied)
            meta["applies"] = str(self.applied + 1)
        for k, h in sorted(self.hashes.items()):
            items = [x for pair in h.items() for x in pair]
            for at in range(0, len(items), 2 * _CHUNK):
                out.append(("HSET", self.keys[k - 1], *items[at : at + 2 * _CHUNK]))
        for k, values in sorted(self.lists.items()):
            for at in range(0, len(values), _CHUNK):
                out.append(("RPUSH", self.keys[k - 1], *values[at : at + _CHUNK]))
        for k, entries in sorted(self.streams.items()):
            out += [("XADD", self.keys[k - 1], entry_id, *fields) for entry_id, fields in entries]
        return out
