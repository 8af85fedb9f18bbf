"""Where a cluster batch's commands go, and why one must be sent again; no I/O.

The unit of routing is a command, or a ``MULTI`` … ``EXEC`` block (rebuilds): a block goes to
one node, whole, and is sent again whole; all its keys must share a slot. A command's slot is
that of its first key: position 1, or the first key of ``EVALSHA``/``EVAL``/``FCALL``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import AskError, ClusterDownError, NoScriptError, TryAgainError

from projectors.batch_io.seam import Command

_SCRIPT_CALLS = frozenset({"EVALSHA", "EVAL", "FCALL", "EVALSHA_RO", "EVAL_RO", "FCALL_RO"})
_NO_KEY = frozenset({"MULTI", "EXEC", "DISCARD", "PING", "ASKING"})
_REDIRECTS = (AskError, TryAgainError, ClusterDownError)  # MovedError is an AskError


def units(commands: Sequence[Command]) -> list[tuple[int, int]]:
    """``[start, end)`` of each command, or of each MULTI … EXEC block as one."""
    found: list[tuple[int, int]] = []
    i, n = 0, len(commands)
    while i < n:
        if commands[i][0] == "MULTI":
            end = i + 1
            while end < n and commands[end][0] != "EXEC":
                end += 1
            found.append((i, min(end + 1, n)))
            i = end + 1
        else:
            found.append((i, i + 1))
            i += 1
    return found


def first_key(command: Command) -> Any:
    name = command[0]
    if name in _SCRIPT_CALLS:
        return command[3] if len(command) > 3 and int(command[2]) > 0 else None
    if name in _NO_KEY or len(command) < 2:
        return None
    return command[1]


def redirected(replies: Sequence[Any]) -> BaseException | None:
    """Why a unit did not run on the node it was sent to, if it did not: a redirection (in a
    MULTI block, a queued command's error, the EXEC then aborted) or a missing script."""
    for reply in replies:
        if isinstance(reply, _REDIRECTS):
            return reply
    for reply in replies:
        if type(reply) is NoScriptError:
            return reply
        if type(reply) is list:
            for inner in reply:
                if type(inner) is NoScriptError:
                    return inner
    return None
