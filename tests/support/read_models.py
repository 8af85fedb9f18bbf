"""Reading the projectors' Redis keys in tests, through the keys the projectors use."""

from __future__ import annotations

from typing import Any

from projectors.keys import Keys

KEYS = Keys("dsh")  # the default DSH_PROJECTOR_KEY_PREFIX


def meta_key(projection: str, session_id: str, keys: Keys = KEYS) -> str:
    return keys.meta(projection, session_id)


def applied(client: Any, projection: str, session_id: str, keys: Keys = KEYS) -> int:
    """The last seq the projection applied to the session (-1: none)."""
    value = client.hget(keys.meta(projection, session_id), "applied")
    return -1 if value is None else int(value)


def applies(client: Any, projection: str, session_id: str, keys: Keys = KEYS) -> int:
    """How many applies the projection made to the session (each event applied once)."""
    return int(client.hget(keys.meta(projection, session_id), "applies") or 0)
