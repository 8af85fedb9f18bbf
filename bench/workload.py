"""What the benchmarks append and publish: a writer benchmark's prompt, and realistic turns
of a session as the projector benchmark's events, interleaved as concurrent writers would."""

from __future__ import annotations

from typing import Any

import dsh
from projectors.records import encode
from servicekit.partitioning import partition_for

TEXT = "The quick brown fox jumps over the lazy dog. " * 4  # ~180 bytes of prompt text
MODEL = {"kind": "model", "provider": "mock", "model": "m1"}


def message(i: int) -> dict[str, Any]:
    """A user/message of ~180 bytes of prompt text."""
    return {
        "id": f"m-{i}",
        "role": "user",
        "content": [{"type": "text", "text": TEXT}],
        "source": {"kind": "user"},
    }


def session(sid: str, turns: int) -> dsh.Session:
    """Realistic turns: prompt, step, assistant with a tool call, tool call and result, ends."""
    s = dsh.Session.create(sid, clock=lambda: 1_700_000_000_000)
    for t in range(1, turns + 1):
        call = f"c{t}"
        s.append("turn/start", {"turn": t})
        prompt = {"type": "text", "text": f"question {t} " + "x" * 200}
        s.append(
            "user/message",
            {"id": f"u{t}", "role": "user", "content": [prompt], "source": {"kind": "user"}},
            "append",
        )
        s.append("step/start", {"turn": t, "step": 1})
        content = [
            {"type": "text", "text": "let me look " + "y" * 200},
            {"type": "tool-call", "id": call, "name": "grep", "arguments": "{}"},
        ]
        s.append(
            "assistant/message",
            {
                "turn": t,
                "step": 1,
                "stream": [],
                "message": {
                    "id": f"a{t}",
                    "role": "assistant",
                    "content": content,
                    "source": MODEL,
                },
            },
            "append",
        )
        tc = s.append(
            "tool/call", {"turn": t, "step": 1, "callId": call, "name": "grep", "arguments": "{}"}
        )
        result = {
            "type": "tool-result",
            "toolCallId": call,
            "isError": False,
            "content": [{"type": "text", "text": "z" * 300}],
        }
        s.append(
            "tool/result",
            {
                "turn": t,
                "step": 1,
                "message": {
                    "id": f"r{t}",
                    "role": "user",
                    "content": [result],
                    "source": {"kind": "tool", "callId": call},
                },
            },
            "append",
            [tc.seq],
        )
        s.append("step/end", {"turn": t, "step": 1})
        s.append("turn/end", {"turn": t, "reason": {"kind": "completed"}})
    return s


def interleaved(sessions: list[dsh.Session], copies: int = 0) -> list[tuple[str, bytes]]:
    """(session id, encoded event) of every event, ordered by seq, then session id, as
    concurrent writers would publish them. ``copies``: that many copies of each session,
    renamed ``ID-copyN``; 0: the sessions as they are."""
    names = [f"-copy{c}" for c in range(copies)] if copies else [""]
    records = [
        (e.seq, sid, encode(sid, e.to_json()))
        for suffix in names
        for s in sessions
        for sid in (s.id + suffix,)
        for e in s.events()
    ]
    records.sort(key=lambda r: (r[0], r[1]))
    return [(sid, value) for _, sid, value in records]


def sessions_in(partition: int, partitions: int, count: int, name: str) -> list[str]:
    """``count`` session ids ``<name>-<n>`` that live on ``partition`` of ``partitions``."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        sid = f"{name}-{i}"
        if partition_for(sid, partitions) == partition:
            found.append(sid)
        i += 1
    return found
