from __future__ import annotations

import pickle

import pytest

import dsh
from dsh.errors import error_from_wire

from .core_builders import new, user


def _rejections() -> list[dsh.SessionError]:
    s = new()
    out: list[dsh.SessionError] = []
    attempts = [
        lambda: s.append("step/start", {"turn": 1, "step": 1}),
        lambda: s.append("user/message", user(), dsh.Replace(0, 0)),
        lambda: s.append("user/message", user(), "append", [5]),
        lambda: s.append("image/offload", {}),
        lambda: dsh.Session.from_restore("r", [{"type": "x"}]),
        lambda: s.fork("c"),
    ]
    for attempt in attempts:
        try:
            attempt()
        except dsh.SessionError as exc:
            out.append(exc)
    return out


@pytest.mark.parametrize("err", _rejections(), ids=lambda e: f"{type(e).__name__}-{e.code}")
def test_errors_cross_the_wire_with_class_code_and_message(err: dsh.SessionError) -> None:
    back = error_from_wire(err.to_wire())
    assert type(back) is type(err) and back.code == err.code and back.message == err.message
    if isinstance(err, dsh.RestoreError):
        assert back.index == err.index  # type: ignore[attr-defined]
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err) and again.code == err.code


def test_every_core_rejection_has_a_specific_code() -> None:
    codes = {e.code for e in _rejections()}
    assert codes == {
        "NO_OPEN_TURN",
        "REPLACE_NOT_EARLIER",
        "SOURCES_NOT_EARLIER",
        "PROJECTION_INTERPRETER_MISSING",
        "INVALID_ENVELOPE",
        "INVALID_BOUNDARY",
    }
