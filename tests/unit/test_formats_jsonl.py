"""Session files as bytes: strict lines, headers, bounds, and write → read round trips."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dsh
from dsh.errors import FormatError
from dsh.formats import (
    Limits,
    SessionHeader,
    encode_session,
    read_jsonl,
    read_wire,
    write_jsonl,
)

HEADER = '{"type":"session","version":3,"id":"s","createdAt":5}'


def event(seq: int, data: Any = None, type_: str = "vendor/x") -> dict[str, Any]:
    return {"type": type_, "seq": seq, "time": 10 + seq, "data": data or {}, "ignorable": True}


def line(value: Any) -> str:
    return json.dumps(value)


def refused(source: Any, code: str, *words: str, limits: Limits | None = None) -> None:
    with pytest.raises(FormatError) as caught:
        read_wire(source, limits) if limits else read_wire(source)
    assert caught.value.code == code, caught.value.message
    for word in words:
        assert word in caught.value.message


# -- lines ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        '{"type":"x","seq":0,"data":NaN}',
        '{"type":"x","seq":0,"data":-Infinity}',
        '{"type":"x","seq":0,"data":1e400}',
        '{"type":"x","seq":0,"seq":0}',
        b'{"type":"\xff"}',
        "[" * 100_000,
    ],
    ids=["syntax", "nan", "infinity", "overflow", "duplicate-key", "not-utf8", "too-deep"],
)
def test_a_line_that_is_not_lossless_json_names_its_line(bad: str | bytes) -> None:
    refused([HEADER, line(event(0)), "", bad], "MALFORMED_LINE", "line 4:")


def test_blank_lines_are_skipped_but_still_counted() -> None:
    header, events = read_wire([HEADER + "\n", "\n", "  \n", line(event(0)) + "\n", "\n"])
    assert header.id == "s"
    assert events == [event(0)]
    refused([HEADER, "", "oops"], "MALFORMED_LINE", "line 3:")


def test_only_newline_ends_a_line(tmp_path: Path) -> None:
    tricky = "a\u2028b\u2029c\x0bd\x0ce\x1cf\x85g\rh"
    path = tmp_path / "s.jsonl"
    write_jsonl(path, "s", [event(0, {"text": tricky})])
    assert read_wire(path)[1][0]["data"]["text"] == tricky
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))  # CRLF files still read
    assert read_wire(path)[1][0]["data"]["text"] == tricky


# -- header -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "words"),
    [
        ("[]", ["must be a JSON object"]),
        ('{"type":"event","version":3,"id":"s","createdAt":0}', ['"type": "session"']),
        ('{"type":"session","version":true,"id":"s","createdAt":0}', ["version"]),
        ('{"type":"session","version":"3","id":"s","createdAt":0}', ["version"]),
        ('{"type":"session","version":3,"id":"","createdAt":0}', ["id"]),
        ('{"type":"session","version":3,"id":"s"}', ["createdAt"]),
        ('{"type":"session","version":3,"id":"s","createdAt":1.5}', ["createdAt"]),
        ('{"type":"session","version":3,"id":"s","createdAt":0,"isSeeded":"no"}', ["isSeeded"]),
        ('{"type":"session","version":3,"id":"s","createdAt":0,"cwd":7}', ["cwd must be a str"]),
    ],
)
def test_bad_headers_are_refused(first: str, words: list[str]) -> None:
    refused(["", first, line(event(0))], "BAD_HEADER", "line 2:", *words)


def test_a_file_without_a_header_is_refused() -> None:
    refused([], "BAD_HEADER", "no header")
    refused(["", " "], "BAD_HEADER", "no header")


def test_future_versions_are_refused_before_their_events_are_looked_at() -> None:
    refused(
        ['{"type":"session","version":4,"id":"s","createdAt":0}', '{"anything": "goes"}'],
        "FUTURE_VERSION",
        "version 4",
    )


def test_v3_events_are_read_as_they_are() -> None:
    events = [event(0, {"a": [1, 2.5, None, True]}), event(1)]
    header, read = read_wire([HEADER, *map(line, events)])
    assert header == SessionHeader("s", 5, 3, 3)
    assert read == events


def test_v3_events_must_be_numbered_by_position() -> None:
    refused([HEADER, line(event(1))], "UNTRANSLATABLE", "line 2", '"seq" must be 0')


# -- bounds -----------------------------------------------------------------------------------


def test_line_limit_is_exact_and_names_the_line(tmp_path: Path) -> None:
    body = line(event(0, {"pad": ""}))
    limits = Limits(max_line_bytes=len(body) + 10)
    fits = line(event(0, {"pad": "x" * 10}))
    too_long = line(event(0, {"pad": "x" * 11}))
    assert len(fits.encode()) == limits.max_line_bytes
    assert read_wire([HEADER, fits], limits)[1][0]["data"]["pad"] == "x" * 10
    refused([HEADER, too_long], "TOO_LARGE", "line 2:", limits=limits)
    path = tmp_path / "s.jsonl"
    path.write_text(f"{HEADER}\n{fits}\n")
    assert len(read_wire(path, limits)[1]) == 1
    path.write_text(f"{HEADER}\n{too_long}\n{fits}\n")
    refused(path, "TOO_LARGE", "line 2:", limits=limits)


def test_file_limit_is_checked_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(f"{HEADER}\n{line(event(0))}\n")
    size = path.stat().st_size
    assert len(read_wire(path, Limits(max_file_bytes=size))[1]) == 1
    refused(path, "TOO_LARGE", "larger than", limits=Limits(max_file_bytes=size - 1))
    lines = [HEADER + "\n", line(event(0)) + "\n"]
    refused(lines, "TOO_LARGE", "larger than", limits=Limits(max_file_bytes=size - 1))


# -- writing ----------------------------------------------------------------------------------


def test_write_from_an_id_takes_created_at_from_the_first_event(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    assert write_jsonl(path, "s", [event(0), event(1)]) == SessionHeader("s", 10)
    assert write_jsonl(path, "s", []) == SessionHeader("s", 0)
    assert write_jsonl(path, "s", [], created_at=7).created_at == 7
    assert read_wire(path)[0] == SessionHeader("s", 7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]  # no temp file left


def test_write_replaces_the_whole_file_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_jsonl(path, "s", [event(0)])
    before = path.read_bytes()
    with pytest.raises(FormatError) as caught:
        write_jsonl(path, "s", [event(0), event(1, {"bad": float("nan")})])
    assert caught.value.code == "NOT_JSON"
    assert "event 1" in caught.value.message
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


def test_only_v3_is_written() -> None:
    with pytest.raises(FormatError):
        list(encode_session(SessionHeader("s", 0, version=2), []))


def test_written_lines_are_compact_and_newline_terminated() -> None:
    lines = list(encode_session(SessionHeader("s", 5), [event(0, {"é": "☃"})]))
    assert lines[0] == HEADER.encode() + b"\n"
    assert lines[1].decode().startswith('{"type":"vendor/x","seq":0')
    assert "☃".encode() in lines[1]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(json_values, max_size=8), st.text(min_size=1))
def test_property_write_then_read_gives_back_the_same_wire_events(
    tmp_path_factory: pytest.TempPathFactory, payloads: list[Any], session_id: str
) -> None:
    path = tmp_path_factory.mktemp("rt") / "s.jsonl"
    events = [event(i, {"v": p}) for i, p in enumerate(payloads)]
    header = write_jsonl(path, session_id, events)
    assert read_wire(path) == (header, events)
    assert read_wire(path.read_text(encoding="utf-8").split("\n")) == (header, events)


# -- dsh.Event ----------------------------------------------------------------------------------


def test_read_jsonl_gives_events_and_names_the_line_of_a_bad_envelope() -> None:
    header, events = read_jsonl([HEADER, line(event(0, {"k": [1]}))])
    assert header.id == "s"
    assert events == (dsh.Event.from_json(event(0, {"k": [1]})),)
    with pytest.raises(FormatError) as caught:
        read_jsonl([HEADER, line(event(0)), line({**event(1), "extra": 1})])
    assert caught.value.code == "INVALID_EVENT"
    assert caught.value.message.startswith("line 3 (v3 seq 1): ")
    assert "extra" in caught.value.message


def test_a_session_written_and_read_back_restores_equal(tmp_path: Path) -> None:
    session = dsh.Session.create("s", clock=iter(range(100, 200)).__next__)
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    message = {
        "id": "u",
        "role": "user",
        "content": [{"type": "text", "text": "hi"}],
        "source": {"kind": "user"},
    }
    session.append("user/message", message, surface_op="append")
    session.append("vendor/note", {"x": 1.5}, ignorable=True)
    path = tmp_path / "s.jsonl"
    header = write_jsonl(path, session.id, session.events())
    assert header.created_at == 100
    read_header, events = read_jsonl(path)
    assert read_header == header
    assert events == session.events()
    restored = dsh.Session.from_restore("s", events)
    assert restored.surface.nodes == session.surface.nodes
    assert restored.derive_messages() == session.derive_messages()


def test_a_written_file_has_the_mode_open_would_give_it(tmp_path: Path) -> None:
    """Not mkstemp's 0600: a session file is shared like any file the user writes; a file
    replaced keeps its own mode."""
    session = dsh.Session.create("modes")
    session.append("session/title", {"title": "t"})
    old = os.umask(0o027)
    try:
        fresh = tmp_path / "fresh.jsonl"
        write_jsonl(fresh, session.id, session.events())
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o640
        fresh.chmod(0o604)
        write_jsonl(fresh, session.id, session.events())
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o604
    finally:
        os.umask(old)


def test_dshs_own_header_keys_are_kept_as_lineage_and_newer_keys_survive_a_rewrite(
    tmp_path: Path,
) -> None:
    """A fork as DSH's session package writes it: cwd, parentSession, isSeeded, and a key
    this version does not know; read, written again, read again: nothing is lost."""
    path = tmp_path / "fork.jsonl"
    header = (
        '{"type":"session","version":3,"id":"child","createdAt":5,"cwd":"/workspace",'
        '"parentSession":"parent","isSeeded":true,"futureKey":{"a":[1]}}'
    )
    path.write_text(header + "\n" + line(event(0)) + "\n")
    read, events = read_jsonl(path)
    assert (read.cwd, read.parent_session, read.is_seeded) == ("/workspace", "parent", True)
    assert read.lineage() == {"cwd": "/workspace", "parentSession": "parent", "isSeeded": True}
    assert dict(read.extra) == {"futureKey": {"a": [1]}}
    again = tmp_path / "again.jsonl"
    write_jsonl(again, read, events)
    assert json.loads(again.read_text().splitlines()[0]) == json.loads(header)
    assert read_jsonl(again)[0] == read


def test_the_invariants_mode_in_a_header_is_read_written_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "bare.jsonl"
    path.write_text('{"type":"session","version":3,"id":"s","createdAt":0,"invariants":false}\n')
    header, _ = read_jsonl(path)
    assert header.invariants is False and header.extra == ()
    assert header.to_json()["invariants"] is False
    assert "invariants" not in SessionHeader("s", 0).to_json()
    bad = '{"type":"session","version":3,"id":"s","createdAt":0,"invariants":"off"}'
    refused([bad], "BAD_HEADER", "invariants must be a bool")
