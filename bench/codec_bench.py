"""Codec (schemas/) benchmark: Avro single-object encode/decode vs json and orjson.

Run: .venv/bin/python -m bench.codec_bench [--runs 7] [--seconds 0.3]
"avro" decodes with the readers a service would run under the same ``DSH_CODEC_NATIVE``
(``auto``: the native build when present; the header line says which), "avro-py" with the
Python readers that build is compiled from, in the same run.
Not a test: it prints medians over several runs and whether the target (>= 100,000 events/s
each way for a typical 1 KB event) is met. Rates are events per CPU-second of this process
(time.process_time), so other work on a shared machine does not count against us; wall-clock
rates are printed beside them.

"avro" is our codec (schemas.encode_event / decode_event); "fastavro" is the same job done by
fastavro on the same schema (the library our compiled codec replaced on the hot path). All
codecs do the same job on the same events: turn the event (wire JSON plus session
id and format version) into bytes, and bytes back into the wire JSON. Ours also checks and
frames (single-object header, fingerprint lookup, lossless checks) on every call.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import fastavro
import orjson

import schemas
from schemas import native
from schemas.convert import compile_codec
from schemas.store import SESSION_EVENT
from servicekit.settings import configure_codec

TEXT = "The quick brown fox jumps over the lazy dog. "
MODEL = {"kind": "model", "provider": "anthropic", "model": "claude-sonnet-4"}


def typical_event() -> dict[str, Any]:
    """An assistant message of about 1 KB of JSON: reasoning, an answer, a tool call, its
    stream of deltas and the usage, the richest common event of a turn."""
    answer = (TEXT * 4)[:160]
    args = '{"path": "src/main.py"}'
    return {
        "type": "assistant/message",
        "seq": 42,
        "time": 1764676800000,
        "data": {
            "turn": 3,
            "step": 2,
            "message": {
                "id": "msg-42",
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "text": "Read the entry point first."},
                    {"type": "text", "text": answer},
                    {"type": "tool-call", "id": "call-7", "name": "read_file", "arguments": args},
                ],
                "source": MODEL,
            },
            "stream": [
                {"t": 0, "kind": "reasoning", "text": "Read the entry point first."},
                {"t": 180, "kind": "text", "text": answer[:80]},
                {"t": 260, "kind": "text", "text": answer[80:]},
                {
                    "t": 300,
                    "kind": "tool-call",
                    "id": "call-7",
                    "name": "read_file",
                    "arguments": args,
                },
            ],
            "usage": {"inputTokens": 1234, "outputTokens": 210},
        },
        "surfaceOp": "append",
    }


def tool_result_event() -> dict[str, Any]:
    """A tool result carrying about 1 KB of output: the other common large event."""
    output = "README.md\nsrc/main.py\n" + TEXT * 20
    return {
        "type": "tool/result",
        "seq": 44,
        "time": 1764676800044,
        "data": {
            "turn": 3,
            "step": 2,
            "message": {
                "id": "msg-44",
                "role": "user",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": "call-7",
                        "content": [{"type": "text", "text": output[:900]}],
                        "isError": False,
                    }
                ],
                "source": {"kind": "tool", "callId": "call-7"},
            },
            "meta": {"durationMs": 12, "exitCode": 0},
        },
        "surfaceOp": "append",
        "sourceEventSeqs": [43],
    }


def turn_events() -> list[dict[str, Any]]:
    """One whole turn, in log order: the mix a writer or projector actually sees."""
    user = {
        "id": "m-1",
        "role": "user",
        "content": [{"type": "text", "text": TEXT * 3}],
        "source": {"kind": "user"},
    }
    result = {
        "id": "m-3",
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "call-7",
                "content": [{"type": "text", "text": "import sys\n" + TEXT * 8}],
                "isError": False,
            }
        ],
        "source": {"kind": "tool", "callId": "call-7"},
    }
    data: list[tuple[str, Any, dict[str, Any]]] = [
        ("turn/start", {"turn": 3}, {}),
        ("user/message", user, {"surfaceOp": "append"}),
        ("step/start", {"turn": 3, "step": 2}, {}),
        (
            "request/header",
            {
                "header": {
                    "config": {"temperature": 0.2, "maxTokens": 4096},
                    "tools": [{"name": "read_file", "schema": {"type": "object"}}],
                },
                "reason": "step",
            },
            {},
        ),
        ("request/context", {"provider": "anthropic", "model": "claude-sonnet-4"}, {}),
        ("assistant/message", typical_event()["data"], {"surfaceOp": "append"}),
        (
            "tool/call",
            {"turn": 3, "step": 2, "callId": "call-7", "name": "read_file", "arguments": "{}"},
            {},
        ),
        (
            "tool/result",
            {"turn": 3, "step": 2, "message": result, "meta": {"durationMs": 12}},
            {"surfaceOp": "append", "sourceEventSeqs": [6]},
        ),
        ("step/end", {"turn": 3, "step": 2}, {}),
        ("turn/end", {"turn": 3, "reason": {"kind": "completed"}}, {}),
    ]
    return [
        {"type": t, "seq": 40 + i, "time": 1764676800000 + i, "data": d, **extra}
        for i, (t, d, extra) in enumerate(data)
    ]


TYPICAL = "1 KB assistant/message (3 blocks, 4 stream deltas, usage)"


def rate(fn: Callable[[], Any], items: int, seconds: float) -> tuple[float, float]:
    """(events per CPU-second, events per wall-second) of one run of about ``seconds``."""
    loops = 1
    while True:
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(loops):
            fn()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        if cpu >= seconds:
            return loops * items / cpu, loops * items / wall
        loops *= 2 if cpu < seconds / 4 else max(2, int(seconds / max(cpu, 1e-6)) + 1)


def measure(events: list[dict[str, Any]], runs: int, seconds: float) -> dict[str, Any]:
    session = "sess-0001"
    values = [{**e, "sessionId": session, "formatVersion": 3} for e in events]
    avro = [schemas.encode_event(e, session) for e in events]
    js = [json.dumps(v) for v in values]
    oj = [orjson.dumps(v) for v in values]
    for e, b in zip(events, avro, strict=True):  # same job, checked
        assert schemas.decode_event(b).event == e

    # The same job done by fastavro on the same schema (what the compiled codec replaced).
    schema = schemas.default_store().current(SESSION_EVENT)
    to_datum, from_datum = compile_codec(schema.schema)

    def fastavro_encode(v: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(schema.header)
        fastavro.schemaless_writer(buf, schema.parsed, to_datum(v))
        return buf.getvalue()

    def fastavro_decode(b: bytes) -> Any:
        buf = io.BytesIO(b)
        buf.seek(10)
        return from_datum(
            fastavro.schemaless_reader(buf, schema.parsed, None, return_record_name=True)
        )

    assert [fastavro_encode(v) for v in values] == avro
    assert [fastavro_decode(b) for b in avro] == values

    # The same codec with the Python readers the native build is compiled from.
    python_readers = schemas.Codec()
    with native.disabled():
        for b in avro:
            schemas.decode_event(b, codec=python_readers)
            schemas.decode_event_frozen(b, codec=python_readers)

    cases: dict[str, Callable[[], Any]] = {
        "avro encode": lambda: [schemas.encode_event(e, session) for e in events],
        "avro decode": lambda: [schemas.decode_event(b) for b in avro],
        "avro-py decode": lambda: [schemas.decode_event(b, codec=python_readers) for b in avro],
        "avro frozen decode": lambda: [schemas.decode_event_frozen(b) for b in avro],
        "avro-py frozen decode": lambda: [
            schemas.decode_event_frozen(b, codec=python_readers) for b in avro
        ],
        "fastavro encode": lambda: [fastavro_encode(v) for v in values],
        "fastavro decode": lambda: [fastavro_decode(b) for b in avro],
        "json encode": lambda: [json.dumps(v) for v in values],
        "json decode": lambda: [json.loads(s) for s in js],
        "orjson encode": lambda: [orjson.dumps(v) for v in values],
        "orjson decode": lambda: [orjson.loads(b) for b in oj],
    }
    out: dict[str, Any] = {
        "events": len(events),
        "json bytes/event": sum(map(len, js)) / len(js),
        "avro bytes/event": sum(map(len, avro)) / len(avro),
    }
    for name, fn in cases.items():
        samples = [rate(fn, len(events), seconds) for _ in range(runs)]
        out[name] = statistics.median(s[0] for s in samples)
        out[name + " (wall)"] = statistics.median(s[1] for s in samples)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--seconds", type=float, default=0.3, help="CPU seconds per run")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args()
    configure_codec()

    results = {
        TYPICAL: measure([typical_event()], args.runs, args.seconds),
        "1 KB tool/result": measure([tool_result_event()], args.runs, args.seconds),
        "whole turn (10 events, mixed)": measure(turn_events(), args.runs, args.seconds),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"python {platform.python_version()} on {platform.machine()}, medians of {args.runs} runs"
        f"; codec readers: {native.describe()}"
    )
    for label, r in results.items():
        print(f"\n{label}: {r['json bytes/event']:.0f} B JSON, {r['avro bytes/event']:.0f} B Avro")
        print(f"  {'codec':<8} {'encode/s':>12} {'decode/s':>12}   (wall: encode/s decode/s)")
        for codec in ("avro", "fastavro", "json", "orjson"):
            enc, dec = r[f"{codec} encode"], r[f"{codec} decode"]
            wenc, wdec = r[f"{codec} encode (wall)"], r[f"{codec} decode (wall)"]
            print(f"  {codec:<8} {enc:>12,.0f} {dec:>12,.0f}   ({wenc:,.0f} {wdec:,.0f})")
        print(
            f"  decode with the native readers {r['avro decode']:,.0f}/s, the Python ones "
            f"{r['avro-py decode']:,.0f}/s ({r['avro decode'] / r['avro-py decode']:.2f}x); "
            f"frozen {r['avro frozen decode']:,.0f}/s against {r['avro-py frozen decode']:,.0f}/s"
            f" ({r['avro frozen decode'] / r['avro-py frozen decode']:.2f}x)"
            + ("" if native.available() else "  [no native readers: both are Python]")
        )
        print(
            f"  avro/orjson: encode {r['avro encode'] / r['orjson encode']:.2f}x,"
            f" decode {r['avro decode'] / r['orjson decode']:.2f}x"
        )
    print()
    for label, r in results.items():
        met = r["avro encode"] >= 100_000 and r["avro decode"] >= 100_000
        print(f"target >= 100,000 events/s each way, {label}: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
