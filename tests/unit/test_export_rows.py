"""The analytics export's rows (projectors/export/rows.py): each typed column from the events
of the demo's scripted session, and the two flat formats written without Kafka and read back
by the engines analysts use."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

import dsh
from cli import demo_script
from interpreters import offload_images
from projectors.export.analytics import ParquetSink, arrow_schema
from projectors.export.avro_files import FlatAvroSink, flat_schema
from projectors.export.files import Exported
from projectors.export.rows import COLUMNS, NAMES, Row, data_json, row_of
from schemas import SESSION_EVENT, EventRecord, default_store, encode_event


def _demo_events() -> tuple[list[dsh.Event], demo_script.Result]:
    session = dsh.Session.create("demo", clock=lambda: 1_700_000_000_000)
    session.register_message_projection("image/offload", offload_images)

    def append(type_: str, data: Any, op: Any, sources: Any) -> dsh.Event:
        return session.append(type_, data, surface_op=op, source_event_seqs=sources)

    script = demo_script.run_script(append)
    return list(session.events()), script


def _row(wire: dict[str, Any], inherited: bool = False, session_id: str = "demo") -> dict[str, Any]:
    row = row_of(EventRecord(session_id, wire), 2, 40 + wire["seq"], inherited)
    return dict(zip(NAMES, row, strict=True))


@pytest.fixture(scope="module")
def demo() -> tuple[list[dict[str, Any]], demo_script.Result]:
    events, script = _demo_events()
    return [_row(e.to_json()) for e in events], script


def _typed(row: dict[str, Any]) -> dict[str, Any]:
    """The non-null columns pulled out of data (the envelope and lineage left out)."""
    typed = NAMES[NAMES.index("turn") : NAMES.index("end_reason") + 1]
    return {k: row[k] for k in typed if row[k] is not None}


def test_the_envelope_and_lineage_are_typed_columns(demo: Any) -> None:
    rows, _ = demo
    first = rows[0]
    assert (first["session_id"], first["seq"], first["time"], first["type"]) == (
        "demo",
        0,
        1_700_000_000_000,
        "turn/start",
    )
    assert (first["format_version"], first["ignorable"], first["inherited"]) == (3, False, False)
    assert (first["partition"], first["offset"]) == (2, 40)
    assert first["surface_op"] is None and first["source_event_seqs"] is None
    assert json.loads(first["data"]) == {"turn": 1}
    assert first["data"] == '{"turn":1}'  # compact, as on the wire


@pytest.mark.parametrize(
    ("type_", "index", "expected"),
    [
        ("turn/start", 0, {"turn": 1}),
        ("step/start", 0, {"turn": 1, "step": 1}),
        ("system/message", 0, {"turn": 1, "step": 1, "role": "system"}),
        ("user/message", 0, {"role": "user"}),
        ("request/context", 0, {"provider": "demo", "model": "scripted-1"}),
        # The provider dropped the stream: a failed attempt, by its error code.
        ("assistant/attempt", 0, {"turn": 1, "step": 1, "error_code": "PROVIDER_OVERLOADED"}),
        # The assistant message asking for a tool carries no usage; the answer does.
        (
            "assistant/message",
            0,
            {"turn": 1, "step": 1, "role": "assistant", "provider": "demo", "model": "scripted-1"},
        ),
        (
            "assistant/message",
            1,
            {
                "turn": 1,
                "step": 2,
                "role": "assistant",
                "provider": "demo",
                "model": "scripted-1",
                "usage_input_tokens": 1050,
                "usage_output_tokens": len(demo_script.TURNS[0].answer) // 4,
            },
        ),
        (
            "tool/call",
            0,
            {"turn": 1, "step": 1, "tool_name": "ci_logs", "tool_call_id": "call-1-ci_logs"},
        ),
        (
            "tool/result",
            0,
            {"turn": 1, "step": 1, "role": "user", "tool_call_id": "call-1-ci_logs"},
        ),
        ("turn/end", 0, {"turn": 1, "end_reason": "completed"}),
        # Plugin and projection types: only data (the compaction's turns are not a turn).
        ("compaction/start", 0, {}),
        ("compaction/end", 0, {}),
        ("image/offload", 0, {}),
    ],
)
def test_each_typed_column_comes_from_the_vocabulary(
    demo: Any, type_: str, index: int, expected: dict[str, Any]
) -> None:
    rows, _ = demo
    row = [r for r in rows if r["type"] == type_][index]
    assert _typed(row) == expected


def test_surface_ops_and_sources_of_a_compaction_and_a_rewrite(demo: Any) -> None:
    rows, script = demo
    by_seq = {r["seq"]: r for r in rows}
    summary = by_seq[script.summary_seq]
    assert summary["surface_op"] == "replace"
    assert (summary["replace_start_seq"], summary["replace_end_seq"]) == (
        script.summarized[0],
        script.summarized[-1],
    )
    assert summary["source_event_seqs"] == script.summarized
    rewrite = by_seq[script.rewrite_seq]
    assert (rewrite["surface_op"], rewrite["replace_start_seq"], rewrite["replace_end_seq"]) == (
        "replace",
        script.rewritten_result_seq,
        script.rewritten_result_seq,
    )
    image = by_seq[script.image_seq]
    assert image["surface_op"] == "append" and image["replace_start_seq"] is None
    offload = by_seq[script.offload_seq]
    assert offload["surface_op"] is None
    assert json.loads(offload["data"]) == {
        "seqs": [script.image_seq],
        "ref": demo_script.OFFLOAD_REF,
    }
    # The image's pixels stay in data, as the log keeps them.
    assert demo_script.PNG_1X1 in image["data"]


def test_a_tool_error_an_ignorable_event_and_odd_values() -> None:
    error = {
        "type": "tool/result",
        "seq": 7,
        "time": 5,
        "data": {
            "turn": 2,
            "step": 1,
            "message": {
                "id": "r",
                "role": "user",
                "content": [],
                "source": {"kind": "tool", "callId": "c9"},
            },
            "error": {"name": "Timeout", "code": "TOOL_OUTCOME_UNKNOWN"},
        },
        "surfaceOp": "append",
        "sourceEventSeqs": [6],
    }
    row = _row(error, inherited=True)
    assert _typed(row) == {
        "turn": 2,
        "step": 1,
        "role": "user",
        "tool_call_id": "c9",
        "error_code": "TOOL_OUTCOME_UNKNOWN",
    }
    assert (row["source_event_seqs"], row["inherited"]) == ([6], True)

    # An ignorable unknown event: its op and sources are opaque data, never applied.
    odd = {
        "type": "vendor/thing",
        "seq": 8,
        "time": 6,
        "data": {"turn": 3, "usage": {"inputTokens": 1}},
        "surfaceOp": {"op": "replace", "startSeq": 1, "endSeq": 2},
        "sourceEventSeqs": [1],
        "ignorable": True,
    }
    row = _row(odd)
    assert row["ignorable"] is True and _typed(row) == {}
    assert (row["surface_op"], row["source_event_seqs"]) == (None, None)

    # Lossless JSON has integers past 64 bits: kept in data, null in a typed column.
    big = {"type": "turn/start", "seq": 9, "time": 7, "data": {"turn": 2**70}}
    row = _row(big)
    assert row["turn"] is None and json.loads(row["data"]) == {"turn": 2**70}
    assert data_json(True) == "true" and data_json("é") == '"é"'


def _flat(type_: Any) -> bool:
    """A type of the flat schema: a primitive, nullable primitive, timestamp or longs."""
    primitives = {"string", "int", "long", "boolean"}
    if isinstance(type_, list):
        return type_[0] == "null" and len(type_) == 2 and _flat(type_[1])
    if isinstance(type_, dict):
        return type_ in (
            {"type": "long", "logicalType": "timestamp-millis"},
            {"type": "array", "items": "long"},
        )
    return type_ in primitives


def test_the_flat_avro_schema_has_no_recursive_or_named_type_inside() -> None:
    schema = flat_schema()
    assert [f["name"] for f in schema["fields"]] == list(NAMES)
    for field in schema["fields"]:
        assert _flat(field["type"]), field
    fastavro.parse_schema(schema)
    assert "JsonValue" not in json.dumps(schema)
    # The wire schema, for contrast, holds the recursive JsonValue: why this export exists.
    assert "dsh.v1.JsonValue" in json.dumps(default_store().current(SESSION_EVENT).schema)
    assert len(arrow_schema()) == len(COLUMNS)


def _written(sink_type: Any, codec: str, rows: list[dsh.Event]) -> bytes:
    fh = io.BytesIO()
    sink = sink_type(fh, codec)
    for i, event in enumerate(rows):
        value = encode_event(event, "demo")
        record = EventRecord("demo", event.to_json())
        sink.add(Exported(0, i, value, record, i < 3))
    sink.finish()
    return fh.getvalue()


def test_flat_avro_and_parquet_read_back_in_polars_and_pyarrow_as_the_rows() -> None:
    import polars as pl
    import pyarrow.parquet as pq

    events, _ = _demo_events()
    expected: list[Row] = [
        row_of(EventRecord("demo", e.to_json()), 0, i, i < 3) for i, e in enumerate(events)
    ]

    table = pq.read_table(io.BytesIO(_written(ParquetSink, "zstd", events)))
    assert table.schema.field("time").type.tz == "UTC"
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    flat = pl.read_avro(io.BytesIO(_written(FlatAvroSink, "deflate", events)))
    for got in (frame, flat):
        assert got.columns == list(NAMES)
        assert got["time"].dtype == pl.Datetime("ms", "UTC")
        assert got.height == len(expected)
        assert got["inherited"].sum() == 3
        assert got["usage_input_tokens"].sum() == sum(
            r[NAMES.index("usage_input_tokens")] or 0 for r in expected
        )
        assert got["data"].to_list() == [r[NAMES.index("data")] for r in expected]
        assert got["source_event_seqs"].to_list() == [
            r[NAMES.index("source_event_seqs")] for r in expected
        ]
