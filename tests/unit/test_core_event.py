from __future__ import annotations

from typing import Any

import pytest

import dsh
from dsh.json_snapshot import FrozenDict
from tests.support.builders import user


def test_wire_round_trip_keeps_every_field() -> None:
    wire: dict[str, Any] = {
        "type": "user/message",
        "seq": 3,
        "time": 7,
        "data": user(),
        "surfaceOp": {"op": "replace", "startSeq": 1, "endSeq": 2},
        "sourceEventSeqs": [2, 1],
        "ignorable": True,
    }
    ev = dsh.Event.from_json(wire)
    assert ev.surface_op == dsh.Replace(1, 2)
    assert ev.source_event_seqs == (2, 1)  # the caller's order
    assert ev.ignorable is True
    assert ev.to_json() == wire
    assert dsh.Event.from_json(ev.to_json()) == ev


def test_to_json_omits_absent_fields_and_is_a_mutable_copy() -> None:
    ev = dsh.Event("turn/start", 0, 5, {"turn": 1})
    out = ev.to_json()
    assert out == {"type": "turn/start", "seq": 0, "time": 5, "data": {"turn": 1}}
    out["data"]["turn"] = 2
    assert ev.data == {"turn": 1}
    assert type(out["data"]) is dict


def test_event_is_frozen_and_its_data_deeply_immutable() -> None:
    ev = dsh.Event("turn/start", 0, 5, {"turn": 1, "x": [1]})
    assert isinstance(ev.data, FrozenDict)
    with pytest.raises(AttributeError):
        ev.seq = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        ev.data["x"].append(2)


def test_replace_wire_form() -> None:
    assert dsh.Replace(1, 4).to_json() == {"op": "replace", "startSeq": 1, "endSeq": 4}


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        ({"type": "turn/start", "seq": 0, "time": 0}, "INVALID_ENVELOPE"),
        ({"type": "turn/start", "seq": 0, "data": {}}, "INVALID_ENVELOPE"),
        ({"type": "turn/start", "seq": 0, "time": 0, "data": {}, "extra": 1}, "INVALID_ENVELOPE"),
        ({"type": "turn/start", "seq": -1, "time": 0, "data": {}}, "INVALID_ENVELOPE"),
        ({"type": "turn/start", "seq": True, "time": 0, "data": {}}, "INVALID_ENVELOPE"),
        ({"type": "turn/start", "seq": 0, "time": 1.5, "data": {}}, "INVALID_ENVELOPE"),
        ({"type": "turnstart", "seq": 0, "time": 0, "data": {}}, "INVALID_TYPE"),
        ({"type": "a/b/c", "seq": 0, "time": 0, "data": {}}, "INVALID_TYPE"),
        ({"type": 3, "seq": 0, "time": 0, "data": {}}, "INVALID_TYPE"),
        ({"type": "x/y", "seq": 0, "time": 0, "data": {}, "ignorable": False}, "INVALID_IGNORABLE"),
        ({"type": "x/y", "seq": 0, "time": 0, "data": float("nan")}, "JSON_NOT_FINITE"),
        ([], "INVALID_ENVELOPE"),
    ],
)
def test_from_json_rejects_bad_envelopes(wire: Any, code: str) -> None:
    with pytest.raises(dsh.ValidationError) as info:
        dsh.Event.from_json(wire)
    assert info.value.code == code


def test_opaque_surface_metadata_of_unknown_events_is_kept() -> None:
    wire = {
        "type": "x/y",
        "seq": 0,
        "time": 0,
        "data": {},
        "surfaceOp": {"op": "weird"},
        "sourceEventSeqs": "not a list",
        "ignorable": True,
    }
    assert dsh.Event.from_json(wire).to_json() == wire
