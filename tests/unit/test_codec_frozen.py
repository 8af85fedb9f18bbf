"""``decode_event_frozen``: the same values as a plain decode frozen by the core, the same
errors, and a deep JsonValue falls back to the plain path so the core's depth limit judges it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

import schemas
from dsh.errors import ValidationError
from dsh.event import Event
from dsh.json_snapshot import MAX_DEPTH, FrozenDict, FrozenList, freeze
from schemas.avro_read import FROZEN_JSON_DEPTH
from tests.unit.test_codec_roundtrip import PROPS, any_events, session_ids


def _same_shape(a: Any, b: Any) -> None:
    """Equal, and the same containers at every level (FrozenDict where freeze makes one)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_shape(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same_shape(x, y)
    else:
        assert a == b


@PROPS
@given(ev=any_events, session_id=session_ids)
def test_frozen_decode_is_a_frozen_plain_decode(ev: dict[str, Any], session_id: str) -> None:
    data = schemas.encode_event(ev, session_id)
    plain = schemas.decode_event(data)
    frozen = schemas.decode_event_frozen(data)
    assert type(frozen.event) is dict  # the envelope stays a plain dict
    assert (frozen.session_id, frozen.format_version) == (plain.session_id, plain.format_version)
    assert frozen.event.keys() == plain.event.keys()
    for key, value in plain.event.items():
        _same_shape(frozen.event[key], freeze(value))
    try:
        expected = Event.from_json(plain.event)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as caught:
            Event.from_json(frozen.event)
        assert caught.value.code == exc.code
    else:
        got = Event.from_json(frozen.event)
        assert got == expected
        assert got.data is frozen.event["data"]  # shared, not copied


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "depth",
    [FROZEN_JSON_DEPTH - 1, FROZEN_JSON_DEPTH + 1, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 5],
)
def test_deep_json_values_fall_back_and_nesting_the_core_refuses_is_unencodable(depth: int) -> None:
    ev = {"type": "x-plugin/thing", "seq": 0, "time": 1, "data": {"v": _nested(depth)}}
    ev["ignorable"] = True
    if depth + 1 > MAX_DEPTH:  # the object and its lists: deeper than the core accepts
        # Not encoded, as not decoded (test_codec_errors decodes such bytes made by hand).
        with pytest.raises(schemas.UnencodableError, match="nested deeper than 128"):
            schemas.encode_event(ev, "s1")
        with pytest.raises(ValidationError) as caught:
            Event.from_json(ev)
        assert caught.value.code == "JSON_TOO_DEEP"
        return
    data = schemas.encode_event(ev, "s1")
    frozen = schemas.decode_event_frozen(data)
    assert frozen.event == schemas.decode_event(data).event
    assert Event.from_json(frozen.event).data == ev["data"]
    if depth < FROZEN_JSON_DEPTH:
        assert type(frozen.event["data"]) is FrozenDict
        assert type(frozen.event["data"]["v"]) is FrozenList


def test_frozen_decode_errors_are_the_plain_ones() -> None:
    good = schemas.encode_event({"type": "turn/start", "seq": 0, "time": 1, "data": {}}, "s")
    for bad in (good[:-1], good + b"\x00", b"\xc3\x01" + b"\x00" * 8, b"xx"):
        with pytest.raises(schemas.CodecError) as plain:
            schemas.decode_event(bad)
        with pytest.raises(schemas.CodecError) as frozen:
            schemas.decode_event_frozen(bad)
        assert type(frozen.value) is type(plain.value)


@PROPS
@given(ev=any_events, session_id=session_ids)
def test_a_frozen_reply_is_a_frozen_plain_reply(ev: dict[str, Any], session_id: str) -> None:
    record = schemas.EventRecord(session_id, ev)
    data = schemas.encode_reply(schemas.AppendReply("r", "c", session_id, events=(record, record)))
    plain = schemas.decode_reply(data)
    frozen = schemas.decode_reply_frozen(data)
    assert (frozen.request_id, frozen.client_id, frozen.session_id, frozen.error) == (
        plain.request_id,
        plain.client_id,
        plain.session_id,
        plain.error,
    )
    assert frozen.events is not None and plain.events is not None
    for got, want in zip(frozen.events, plain.events, strict=True):
        assert type(got.event) is dict
        for key, value in want.event.items():
            _same_shape(got.event[key], freeze(value))
