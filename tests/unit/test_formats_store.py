"""The embedded file store: write-behind appends, the flush barrier, crashes, reopening."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dsh
from dsh.errors import FormatError
from dsh.formats import read_wire
from dsh.formats.store import FileStore, StoreError

DATA = Path(__file__).parent / "data" / "formats"


def clock() -> Any:
    ticks = itertools.count(1_000)
    return lambda: next(ticks)


def say(session: Any, text: str) -> Any:
    message = {
        "id": text,
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }
    return session.append("user/message", message, surface_op="append")


def wire(session: Any) -> list[dict[str, Any]]:
    return [e.to_json() for e in session.events()]


def test_appends_reach_the_file_only_at_flush(tmp_path: Path) -> None:
    store = FileStore(tmp_path, clock=clock())
    session = store.create("s1")
    say(session, "a")
    path = tmp_path / "s1.jsonl"
    assert not path.exists()  # write-behind: nothing before the barrier
    assert "s1" in store
    store.flush()
    header, events = read_wire(path)
    assert (header.id, header.version) == ("s1", 3)
    assert events == wire(session)
    say(session, "b")
    assert len(read_wire(path)[1]) == 1
    store.flush()
    assert read_wire(path)[1] == wire(session)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s1.jsonl"]


def test_reopen_restores_an_equal_session(tmp_path: Path) -> None:
    with FileStore(tmp_path, clock=clock()) as store:
        session = store.create("s1")
        for text in "abc":
            say(session, text)
        say(session, "d")
        session.append(
            "user/message",
            {"id": "sum", "role": "user", "content": [], "source": {"kind": "user"}},
            surface_op={"op": "replace", "startSeq": 0, "endSeq": 2},
            source_event_seqs=[0, 1, 2],
        )
        before = wire(session)
        nodes = session.surface.nodes
    reopened = FileStore(tmp_path).open("s1")
    assert wire(reopened)[: len(before)] == before
    assert reopened.surface.nodes == nodes
    assert reopened.surface.replace_generation == 1
    # restore marks the seam with session/end-seed; the store keeps it like any other event
    assert [e.type for e in reopened.events(len(before))] == ["session/end-seed"]
    store = FileStore(tmp_path)
    again = store.open("s1")
    assert store.open("s1") is again
    store.close()
    assert wire(FileStore(tmp_path).open("s1")) == wire(reopened)


def test_a_crash_before_flush_loses_only_the_unflushed_events(tmp_path: Path) -> None:
    store = FileStore(tmp_path, clock=clock())
    session = store.create("s1")
    say(session, "kept")
    store.flush()
    kept = wire(session)
    say(session, "lost")
    del store  # the process dies: no flush, no close
    restored = FileStore(tmp_path).open("s1")
    assert wire(restored)[:-1] == kept
    assert restored.event(len(restored) - 1).type == "session/end-seed"


def test_a_session_created_but_never_flushed_does_not_exist_after_a_crash(tmp_path: Path) -> None:
    FileStore(tmp_path).create("ghost")
    with pytest.raises(StoreError) as caught:
        FileStore(tmp_path).open("ghost")
    assert caught.value.code == "SESSION_NOT_FOUND"


def test_a_torn_last_line_is_cut_off_on_open(tmp_path: Path) -> None:
    with FileStore(tmp_path, clock=clock()) as store:
        session = store.create("s1")
        say(session, "a")
        kept = wire(session)
    path = tmp_path / "s1.jsonl"
    with open(path, "ab") as fh:
        fh.write(b'{"type":"user/message","seq":1,"ti')
    restored = FileStore(tmp_path).open("s1")
    assert wire(restored)[:1] == kept
    assert path.read_bytes().endswith(b"\n")


def test_a_whole_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "legacy-0.jsonl"
    path.write_bytes((DATA / "v0_legacy.jsonl").read_bytes().rstrip(b"\n"))
    store = FileStore(tmp_path)
    session = store.open("legacy-0")
    assert session.event(15).type == "turn/end"  # the unterminated last line, migrated
    say(session, "more")
    store.flush()
    assert read_wire(path)[1] == wire(session)


def test_a_failed_flush_leaves_a_clean_file_and_keeps_the_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, clock=clock())
    session = store.create("s1")
    say(session, "a")
    store.flush()
    say(session, "b")
    path = tmp_path / "s1.jsonl"
    size = path.stat().st_size
    real_write = os.write

    def half_then_fail(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError("disk full")

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        store.flush()
    assert path.stat().st_size == size
    monkeypatch.setattr(os, "write", real_write)
    store.flush()
    assert read_wire(path)[1] == wire(session)


def test_flush_fsyncs_the_file_and_on_create_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    store = FileStore(tmp_path, clock=clock())
    say(store.create("s1"), "a")
    store.flush()
    assert synced == ["file", "dir"]
    synced.clear()
    say(store.open("s1"), "b")
    store.flush()
    assert synced == ["file"]
    synced.clear()
    store.flush()  # nothing pending: nothing to make durable
    assert synced == []


@pytest.mark.parametrize(
    "bad", ["", ".hidden", "../escape", "a/b", "a\\b", "nul\x00", "x" * 129, "sp ace", "é"]
)
def test_unsafe_session_ids_are_refused(tmp_path: Path, bad: str) -> None:
    store = FileStore(tmp_path)
    for attempt in (store.create, store.open):
        with pytest.raises(StoreError) as caught:
            attempt(bad)
        assert caught.value.code == "UNSAFE_SESSION_ID"
        assert "safe file name" in caught.value.message
    assert list(tmp_path.iterdir()) == []


def test_create_refuses_an_existing_session_and_open_a_missing_one(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.create("s1")
    with pytest.raises(StoreError) as caught:
        store.create("s1")  # not flushed yet, still taken
    assert caught.value.code == "SESSION_EXISTS"
    store.close()
    with pytest.raises(StoreError) as caught:
        FileStore(tmp_path).create("s1")
    assert caught.value.code == "SESSION_EXISTS"
    with pytest.raises(StoreError) as caught:
        store.open("nope")
    assert caught.value.code == "SESSION_NOT_FOUND"
    with pytest.raises(StoreError) as caught:
        store.flush("nope")
    assert caught.value.code == "SESSION_NOT_OPEN"


def test_store_errors_cross_the_wire() -> None:
    err = StoreError("x", code="SESSION_EXISTS")
    back = dsh.errors.error_from_wire(err.to_wire())
    assert type(back) is StoreError
    assert back.code == "SESSION_EXISTS"


def test_a_header_naming_another_session_is_refused(tmp_path: Path) -> None:
    shutil.copy(DATA / "v1_attempts.v3.jsonl", tmp_path / "other.jsonl")
    with pytest.raises(FormatError, match="does not match the file name"):
        FileStore(tmp_path).open("other")


def test_an_old_format_file_is_rewritten_as_v3_at_the_next_flush(tmp_path: Path) -> None:
    path = tmp_path / "legacy-0.jsonl"
    shutil.copy(DATA / "v0_legacy.jsonl", path)
    store = FileStore(tmp_path)
    session = store.open("legacy-0")
    assert read_wire(path)[0].source_version == 0  # untouched until the barrier
    store.flush()
    header, events = read_wire(path)
    assert (header.source_version, header.created_at) == (3, 1000)
    assert events == wire(session)
    say(session, "more")
    store.flush()
    assert read_wire(path)[1] == wire(session)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["say", "say", "flush", "crash"]), max_size=25))
def test_property_reopening_gives_back_exactly_what_was_flushed(
    tmp_path_factory: pytest.TempPathFactory, ops: list[str]
) -> None:
    directory = tmp_path_factory.mktemp("store")
    store = FileStore(directory, clock=clock())
    session = store.create("s")
    durable: list[dict[str, Any]] | None = None
    for n, op in enumerate(ops):
        if op == "say":
            say(session, f"m{n}")
        elif op == "flush":
            store.flush()
            durable = wire(session)
        elif durable is None:  # a crash before the first flush: the session never existed
            assert "s" not in FileStore(directory)
            return
        else:
            store = FileStore(directory, clock=clock())
            session = store.open("s")
            restored = wire(session)
            # restore seals a non-empty log with one session/end-seed unless it ends with one
            sealed = not durable or durable[-1]["type"] == "session/end-seed"
            assert restored[: len(durable)] == durable
            assert [e["type"] for e in restored[len(durable) :]] == (
                [] if sealed else ["session/end-seed"]
            )
            store.flush()
            durable = restored


def _offload(event: Any, ctx: Any) -> dict[int, Any]:
    seq = event.data["seq"]
    message = dict(ctx.messages[seq])
    message["content"] = [{"type": "text", "text": "[offloaded]"}]
    return {seq: message}


def test_message_projections_are_registered_on_create_and_replayed_on_open(
    tmp_path: Path,
) -> None:
    with FileStore(tmp_path, projections={"image/offload": _offload}) as store:
        session = store.create("s1")
        say(session, "big")
        session.append("image/offload", {"seq": 0})
        assert [m["content"][0]["text"] for m in session.derive_messages()] == ["[offloaded]"]
    reopened = FileStore(tmp_path, projections={"image/offload": _offload}).open("s1")
    assert [m["content"][0]["text"] for m in reopened.derive_messages()] == ["[offloaded]"]
    with pytest.raises(dsh.SessionError):
        FileStore(tmp_path).open("s1").derive_messages()


def test_ids_lists_sessions_on_disk_and_open_ones(tmp_path: Path) -> None:
    (tmp_path / "not a session.jsonl").write_text("")
    (tmp_path / "notes.txt").write_text("")
    store = FileStore(tmp_path)
    store.create("b")
    store.flush()
    store.create("a")
    assert store.ids() == ["a", "b"]
    assert FileStore(tmp_path).ids() == ["b"]


def test_a_sessions_invariants_mode_is_recorded_in_its_file_and_honoured_on_open(
    tmp_path: Path,
) -> None:
    """A bare session's file says so; a store with the other default opens it in its own
    mode. A file that does not say (DSH's) takes the store's."""
    bare = FileStore(tmp_path, clock=clock(), invariants=False)
    session = bare.create("bare")
    # Only the turn invariants refuse an assistant message outside a turn.
    message = {
        "id": "a",
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "source": {"kind": "model", "provider": "p", "model": "m"},
    }
    session.append(
        "assistant/message",
        {"turn": 1, "step": 1, "message": message, "stream": []},
        surface_op="append",
    )
    bare.flush()
    header, _ = read_wire(tmp_path / "bare.jsonl")
    assert header.invariants is False
    strict = FileStore(tmp_path, clock=clock())
    assert strict.open("bare").invariants is False
    on = strict.create("on")
    say(on, "a")
    strict.flush()
    assert read_wire(tmp_path / "on.jsonl")[0].invariants is None  # the default is not written
    assert FileStore(tmp_path, invariants=False).open("on").invariants is False
