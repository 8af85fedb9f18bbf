from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

import dsh
import dsh.errors
from dsh.errors import error_from_wire
from tests.support.builders import new, user


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


def test_every_code_raised_by_the_core_is_documented() -> None:
    core = Path(dsh.__file__).parent
    raised: set[str] = set()
    for path in core.glob("*.py"):
        text = path.read_text()
        raised |= set(re.findall(r'code="([A-Z0-9_]+)"', text))
        raised |= set(re.findall(r'_err\([^)]*"([A-Z][A-Z0-9_]+)"', text, re.S))
        raised |= set(re.findall(r'_bad\([^)]*"([A-Z][A-Z0-9_]+)"\s*,?\s*\)', text, re.S))
    assert raised >= {"REPLACE_SOURCES_MISSING", "TURN_NUMBER", "TOOL_RESULT_SHAPE"}
    missing = {c for c in raised if f"``{c}``" not in (dsh.errors.__doc__ or "")}
    assert not missing, f"document these codes in dsh/errors.py: {sorted(missing)}"
