"""Golden vectors: ``schemas/vectors/vectors.json`` pins the exact bytes of hand-picked records.

Other implementations test against the same file: decode each ``hex`` with only the ``.avsc``
files and compare with ``value``; encode ``value`` and compare with ``hex``. After a deliberate
schema change, regenerate with ``python -m tests.unit.test_codec_vectors`` and review the diff.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import schemas
from schemas.store import APPEND_COMMAND, APPEND_REPLY, SESSION_EVENT, WRITER_SNAPSHOT

VECTORS = Path(schemas.SCHEMA_DIR) / "vectors" / "vectors.json"

MSG = {
    "id": "msg-1",
    "role": "user",
    "content": [{"type": "text", "text": "List the files, please."}],
    "source": {"kind": "user"},
}
MODEL = {"kind": "model", "provider": "anthropic", "model": "claude-sonnet-4"}


def _ev(seq: int, type_: str, data: Any, **extra: Any) -> dict[str, Any]:
    return {
        "sessionId": "sess-vectors",
        "formatVersion": 3,
        "type": type_,
        "seq": seq,
        "time": 1764676800000 + seq,
        "data": data,
        **extra,
    }


def cases() -> list[tuple[str, str, dict[str, Any]]]:
    events = [
        ("turn/start", _ev(0, "turn/start", {"turn": 1})),
        ("step/start", _ev(1, "step/start", {"turn": 1, "step": 1})),
        (
            "system/message",
            _ev(
                2,
                "system/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": {
                        "id": "sys-1",
                        "role": "system",
                        "content": [{"type": "text", "text": "You are terse."}],
                        "source": {"kind": "plugin", "plugin": "prompt"},
                    },
                },
                surfaceOp="append",
            ),
        ),
        ("user/message", _ev(3, "user/message", MSG, surfaceOp="append")),
        (
            "request/header",
            _ev(
                4,
                "request/header",
                {
                    "header": {
                        "config": {"temperature": 0.2, "maxTokens": 1024, "stop": None},
                        "tools": [{"name": "ls", "schema": {"type": "object"}}],
                    },
                    "reason": "first-request",
                    "startsSeries": True,
                },
            ),
        ),
        (
            "request/context",
            _ev(
                5,
                "request/context",
                {"provider": "anthropic", "model": "claude-sonnet-4", "contextWindow": 200000},
            ),
        ),
        (
            "assistant/attempt",
            _ev(
                6,
                "assistant/attempt",
                {"turn": 1, "step": 1, "stream": [{"t": 0, "kind": "text", "text": "Su"}]},
            ),
        ),
        (
            "assistant/message",
            _ev(
                7,
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": {
                        "id": "msg-2",
                        "role": "assistant",
                        "content": [
                            {"type": "reasoning", "text": "Use ls."},
                            {
                                "type": "tool-call",
                                "id": "call-1",
                                "name": "ls",
                                "arguments": '{"path":"."}',
                            },
                        ],
                        "source": MODEL,
                    },
                    "stream": [
                        {"t": 0, "kind": "reasoning", "text": "Use ls."},
                        {
                            "t": 41,
                            "kind": "tool-call",
                            "id": "call-1",
                            "name": "ls",
                            "arguments": '{"path":"."}',
                        },
                    ],
                    "usage": {"inputTokens": 120, "outputTokens": 17},
                },
                surfaceOp="append",
            ),
        ),
        (
            "tool/call",
            _ev(
                8,
                "tool/call",
                {
                    "turn": 1,
                    "step": 1,
                    "callId": "call-1",
                    "name": "ls",
                    "arguments": '{"path":"."}',
                },
            ),
        ),
        (
            "tool/result",
            _ev(
                9,
                "tool/result",
                {
                    "turn": 1,
                    "step": 1,
                    "message": {
                        "id": "msg-3",
                        "role": "user",
                        "content": [
                            {
                                "type": "tool-result",
                                "toolCallId": "call-1",
                                "content": [{"type": "text", "text": "README.md\nsrc/"}],
                                "isError": False,
                            }
                        ],
                        "source": {"kind": "tool", "callId": "call-1"},
                    },
                    "meta": {"durationMs": 12, "exit": 0, "host": None},
                },
                surfaceOp="append",
                sourceEventSeqs=[8],
            ),
        ),
        (
            "tool/result error",
            _ev(
                10,
                "tool/result",
                {
                    "turn": 1,
                    "step": 1,
                    "message": {
                        "id": "msg-4",
                        "role": "user",
                        "content": [
                            {
                                "type": "tool-result",
                                "toolCallId": "call-2",
                                "content": [],
                                "isError": True,
                            }
                        ],
                        "source": {"kind": "tool", "callId": "call-2"},
                    },
                    "error": {
                        "name": "ToolError",
                        "code": "TOOL_NOT_STARTED",
                        "reason": "never dispatched",
                    },
                },
                surfaceOp="append",
            ),
        ),
        ("step/end", _ev(11, "step/end", {"turn": 1, "step": 1})),
        ("turn/end", _ev(12, "turn/end", {"turn": 1, "reason": {"kind": "completed"}})),
        (
            "replace op",
            _ev(
                13,
                "user/message",
                {**MSG, "id": "msg-5", "content": [{"type": "text", "text": "Summary of 3..9"}]},
                surfaceOp={"op": "replace", "startSeq": 3, "endSeq": 9},
                sourceEventSeqs=[3, 7, 9],
            ),
        ),
        (
            "unicode",
            _ev(
                14,
                "user/message",
                {
                    **MSG,
                    "id": "ünï-💬",
                    "content": [{"type": "text", "text": "日本語 — 🌍🏳️‍🌈 \u0000 \U0010ffff"}],
                },
                surfaceOp="append",
            ),
        ),
        (
            "image block",
            _ev(
                15,
                "user/message",
                {
                    **MSG,
                    "id": "msg-6",
                    "content": [
                        {"type": "image", "mediaType": "image/png", "data": "iVBORw0KGgo="}
                    ],
                },
                surfaceOp="append",
            ),
        ),
        ("session/end-seed", _ev(16, "session/end-seed", {"inherited": True})),
        ("session/title (plugin)", _ev(17, "session/title", {"title": "Listing files"})),
        (
            "big ints and floats",
            _ev(
                18,
                "compaction/end",
                {
                    "long max": 9223372036854775807,
                    "long min": -9223372036854775808,
                    "beyond": 9223372036854775808,
                    "huge": -123456789012345678901234567890,
                    "floats": [0.1, -2.5e-300, 1e300, 3.0, -0.0],
                    "nested": {"a": [[], {}, [None, True, False, ""]]},
                },
            ),
        ),
        (
            "misfit data falls back to JsonValue",
            _ev(19, "turn/start", {"turn": 2, "note": "extra key"}),
        ),
        (
            "ignorable unknown with opaque ops",
            _ev(
                20,
                "acme/telemetry",
                [1, "two", {"three": 3.0}],
                surfaceOp={"op": "prepend", "at": 0},
                sourceEventSeqs="not-a-list",
                ignorable=True,
            ),
        ),
        (
            "assistant/attempt failed, tool call streamed",
            _ev(
                21,
                "assistant/attempt",
                {
                    "turn": 2,
                    "step": 1,
                    "stream": [
                        {"t": 0, "kind": "tool-call", "id": "call-3", "name": "ls"},
                        {"t": 9, "kind": "tool-call", "id": "call-3", "argumentsDelta": '{"pa'},
                    ],
                    "error": {"code": "PROVIDER_OVERLOADED", "retryInMs": 250},
                },
            ),
        ),
        (
            "compaction/start",
            _ev(22, "compaction/start", {"reason": "context window", "turns": [1, 10]}),
        ),
        ("compaction/end", _ev(23, "compaction/end", {"summary": 13, "replaced": 38})),
        ("image/offload", _ev(24, "image/offload", {"seqs": [15], "ref": "blob://img/1"})),
    ]
    out = [(f"event: {name}", SESSION_EVENT, value) for name, value in events]
    out.append(
        (
            "command",
            APPEND_COMMAND,
            {
                "requestId": "req-1",
                "clientId": "client-a",
                "sessionId": "sess-vectors",
                "expectedSeq": 3,
                "events": [
                    {"type": "user/message", "data": MSG, "surfaceOp": "append"},
                    {"type": "turn/start", "data": {"turn": 1}},
                ],
            },
        )
    )
    out.append(
        (
            "reply: committed",
            APPEND_REPLY,
            {
                "requestId": "req-1",
                "clientId": "client-a",
                "sessionId": "sess-vectors",
                "result": {"events": [events[3][1]]},
            },
        )
    )
    out.append(
        (
            "reply: rejected",
            APPEND_REPLY,
            {
                "requestId": "req-2",
                "clientId": "client-a",
                "sessionId": "sess-vectors",
                "result": {
                    "error": "SurfaceError",
                    "code": "SURFACE",
                    "message": "surface replace: sourceEventSeqs must include every shadowed"
                    " surface node; missing 3, 5",
                    "details": {},
                },
            },
        )
    )
    out.append(
        (
            "snapshot",
            WRITER_SNAPSHOT,
            {
                "sessionId": "sess-vectors",
                "formatVersion": 3,
                "lastSeq": 1,
                "events": [events[0][1], events[1][1]],
                "requests": [
                    {"requestId": "req-1", "clientId": "client-a", "firstSeq": 0, "count": 2}
                ],
                "state": {"openTurn": 1},
            },
        )
    )
    return out


def build() -> dict[str, Any]:
    codec = schemas.Codec()
    return {
        "doc": "Avro single-object records: hex = C3 01, 8-byte little-endian CRC-64-AVRO "
        "fingerprint of the writer schema, body. value is the record as wire JSON: a null "
        "field is an absent key, a JsonValue is its value.",
        "fingerprints": {m.name: m.fingerprint_hex for m in codec.store.schemas()},
        "vectors": [
            {
                "name": name,
                "schema": schema,
                "value": value,
                "hex": codec.encode(schema, value).hex(),
            }
            for name, schema, value in cases()
        ],
    }


def test_vectors_file_is_current() -> None:
    assert json.loads(VECTORS.read_text(encoding="utf-8")) == build()


def _stored() -> list[dict[str, Any]]:
    if not VECTORS.exists():  # only while regenerating
        return []
    return list(json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"])


@pytest.mark.parametrize("vector", _stored(), ids=lambda v: str(v["name"]))
def test_codec_reproduces_vector_bytes(vector: dict[str, Any]) -> None:
    codec = schemas.Codec()
    data = bytes.fromhex(vector["hex"])
    assert codec.encode(vector["schema"], vector["value"]) == data
    assert codec.decode(data) == (vector["schema"], vector["value"])


def test_every_vocabulary_type_has_a_vector() -> None:
    from dsh.vocabulary import CORE_TYPES

    covered = {v["value"]["type"] for v in build()["vectors"] if v["schema"] == SESSION_EVENT}
    assert CORE_TYPES - {"compaction/start"} <= covered


if __name__ == "__main__":
    VECTORS.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {VECTORS}", file=sys.stderr)
