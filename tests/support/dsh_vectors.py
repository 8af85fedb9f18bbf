"""The reference vectors recorded from DSH's own session package (``../shared/dsh-vectors``,
see its README): loading them, and their placeholders for values JSON cannot carry."""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.contract import Driver

REPO = Path(__file__).resolve().parents[2]
VECTORS = Path(
    os.environ.get("DSH_VECTORS", REPO.parent / "shared" / "dsh-vectors" / "vectors.jsonl")
)
PINNED = 1700000000000


def load() -> list[dict[str, Any]]:
    if not VECTORS.exists():
        return []
    with VECTORS.open() as f:
        return [json.loads(line) for line in f if line.strip()]


SCENARIOS = [s for s in load() if s["attempts"] or s["sessions"]]


class Skip(Exception):
    """A value or an operation with no Python counterpart."""


class Box:
    def __init__(self, v: object) -> None:
        self.v = v


UNDEFINED = object()


def decode(value: Any, parent: Any = None) -> Any:
    """Turn ``{"$nonjson": ...}`` placeholders into the closest Python non-JSON values."""
    if isinstance(value, dict):
        if "$nonjson" in value:
            tag = value["$nonjson"]
            if tag in ("-0", "hole") or tag.startswith("bigint"):
                raise Skip(tag)
            table = {
                "NaN": float("nan"),
                "Infinity": float("inf"),
                "-Infinity": float("-inf"),
                "undefined": UNDEFINED,
                "function": lambda: None,
                "circular": parent,
                "Map": set(),
                "Set": set(),
            }
            return table[tag] if tag in table else special(tag, value)
        out: dict[str, Any] = {}
        for k, v in value.items():
            out[k] = decode(v, out)
        return out
    if isinstance(value, list):
        lst: list[Any] = []
        for v in value:
            lst.append(decode(v, lst))
        return lst
    return value


def special(tag: str, value: dict[str, Any]) -> Any:
    if tag.startswith("symbol"):
        return object()
    if tag.startswith("Date"):
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    if tag.startswith("instance"):
        return Box(value.get("v"))
    raise AssertionError(f"unmapped placeholder {tag}")


def invariants_of(session_name: str) -> bool:
    """DSH records bare sessions; its invariants are a companion, on for ``inv-`` sessions."""
    return session_name.startswith("inv-")


def scenario_of(vector: dict[str, Any]) -> Callable[[Driver], None]:
    """The vector's appends and forks, for any backend (the seed and restore constructions
    belong to the core's own tests: tests/unit/test_dsh_vectors.py)."""

    def drive(driver: Driver) -> None:
        for a in vector["attempts"]:
            try:
                if a["op"] == "append":
                    options = a.get("options", {})
                    driver.append(
                        a["session"],
                        a["type"],
                        decode(a["data"]),
                        decode(options.get("surfaceOp")),
                        decode(options.get("sourceEventSeqs")),
                    )
                elif a["op"] == "fork":
                    boundary = a["boundary"]
                    at = None if boundary is None else boundary + 1
                    driver.fork(parent_of(vector, a), a["session"], at)
            except Skip:
                continue

    return drive


def parent_of(vector: dict[str, Any], attempt: dict[str, Any]) -> str:
    final = vector["sessions"].get(attempt["session"]) or {}
    parent: str | None = final.get("header", {}).get("parentSession")
    if parent is None:
        found = re.search(r'session "([^"]+)"', attempt["error"]["message"])
        assert found is not None, attempt
        parent = found.group(1)
    return parent
