"""``schemas.frames``: an event assembled from its command's draft bytes is byte for byte the
event the codec writes, the command decodes to the same values (drafts' data frozen), and
anything unusual falls back to the codec with the codec's own errors. Also the writer's
snapshot assembled from those bytes (``producers.writer.wire.snapshot_value``) equals the
codec's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import schemas
from dsh.json_snapshot import FrozenDict, FrozenList, freeze
from producers.writer.wire import answered_request, snapshot_value
from schemas import AnsweredRequest, AppendCommand, WriterSnapshot
from schemas.errors import CodecError
from schemas.frames import SPLICEABLE, decode_command_frames, event_prefix, event_value
from tests.unit.test_codec_roundtrip import PROPS, any_events, session_ids

ENVELOPE = ("seq", "time")


def _draft(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ev.items() if k not in ENVELOPE}


commands = st.builds(
    lambda rid, cid, sid, evs, expected: AppendCommand(rid, cid, sid, tuple(evs), expected),
    st.text(max_size=12),
    st.text(max_size=12),
    session_ids,
    st.lists(any_events.map(_draft), min_size=1, max_size=4),
    st.one_of(st.none(), st.integers(min_value=0, max_value=2**40)),
)
stamps = st.tuples(st.integers(0, 2**62), st.integers(0, 2**45))


def test_the_current_schemas_are_spliceable() -> None:
    # If a schema change breaks the layout the writer silently loses its fast path: say so.
    assert SPLICEABLE


@PROPS
@given(command=commands, stamp=stamps)
def test_assembled_events_are_the_codecs_bytes(
    command: AppendCommand, stamp: tuple[int, int]
) -> None:
    data = schemas.encode_command(command)
    decoded, frames = decode_command_frames(data)
    assert decoded == schemas.decode_command(data)
    assert frames is not None and len(frames) == len(command.events)
    seq, time_ms = stamp
    prefix = event_prefix(command.session_id)
    for i, (draft, frame) in enumerate(zip(command.events, frames, strict=True)):
        wire = {**draft, "seq": seq + i, "time": time_ms}
        assert event_value(prefix, frame, seq + i, time_ms) == schemas.encode_event(
            wire, command.session_id
        )


@PROPS
@given(command=commands)
def test_drafts_data_comes_out_frozen(command: AppendCommand) -> None:
    decoded, _ = decode_command_frames(schemas.encode_command(command))
    for draft in decoded.events:
        assert type(draft) is dict
        data = draft["data"]
        if isinstance(data, (dict, list)):
            assert isinstance(data, (FrozenDict, FrozenList))
            assert data == freeze(data)


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda b: b[:-3], id="truncated"),
        pytest.param(lambda b: b + b"\x00", id="trailing byte"),
        pytest.param(lambda b: b[:2] + b"\x00" * 8 + b[10:], id="unknown fingerprint"),
        pytest.param(lambda b: b"\x00\x01" + b[2:], id="bad marker"),
    ],
)
def test_bad_bytes_raise_exactly_what_the_codec_raises(mangle: Any) -> None:
    command = AppendCommand(
        "r", "c", "s", ({"type": "user/message", "data": {"id": "m", "role": "user"}},)
    )
    data = mangle(schemas.encode_command(command))
    with pytest.raises(CodecError) as expected:
        schemas.decode_command(data)
    with pytest.raises(type(expected.value)) as got:
        decode_command_frames(data)
    assert got.value.code == expected.value.code


def test_json_nested_past_the_frozen_readers_depth_falls_back_to_a_plain_decode() -> None:
    deep: Any = "leaf"
    for _ in range(80):
        deep = [deep]
    command = AppendCommand("r", "c", "s", ({"type": "x/y", "data": {"v": deep}},))
    decoded, frames = decode_command_frames(schemas.encode_command(command))
    assert frames is None  # the codec's own path: the core's depth limit judges it
    assert decoded == command


@PROPS
@given(
    events=st.lists(any_events, max_size=5),
    session_id=session_ids,
    requests=st.lists(
        st.tuples(st.text(max_size=8), st.text(max_size=8), st.integers(0, 99), st.integers(1, 9)),
        max_size=4,
        unique_by=lambda r: r[0],
    ),
)
def test_assembled_snapshot_is_the_codecs_snapshot(
    events: list[dict[str, Any]],
    session_id: str,
    requests: list[tuple[str, str, int, int]],
) -> None:
    events = [{**ev, "seq": i} for i, ev in enumerate(events)]
    expected = schemas.encode_snapshot(
        WriterSnapshot(session_id, tuple(events), tuple(AnsweredRequest(*r) for r in requests))
    )
    got = snapshot_value(
        session_id,
        3,
        [schemas.encode_event(ev, session_id) for ev in events],
        b"".join(answered_request(*r) for r in requests),
        len(requests),
    )
    assert got == expected
