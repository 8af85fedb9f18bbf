"""`dsh import` plans before it publishes: the drafts are the file's own values, the batches
keep their limits, and the size check on the encoded commands refuses exactly what the
writer would, naming the seq."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import dsh
from bench.workload import session
from dsh.formats import write_jsonl
from producers import import_plan
from producers.errors import PayloadTooLargeError
from producers.import_plan import (
    BATCH_MAX_EVENTS,
    BATCH_MAX_JSON_BYTES,
    Plan,
    batches,
    check_sizes,
    drafts_of,
    new_attempt,
    request_id,
)
from producers.importer import read_session_file
from schemas import decode_command, encode_event

DRAFT_KEYS = ("type", "data", "surfaceOp", "sourceEventSeqs", "ignorable")


def _as_draft(ev: dsh.Event) -> dict[str, Any]:
    w = ev.to_json()
    return {k: w[k] for k in DRAFT_KEYS if k in w}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    write_jsonl(path, "s", session("s", 40).events())
    return path


def test_the_drafts_are_the_events_as_appends(source: Path) -> None:
    _, events, drafts, _ = read_session_file(source)
    assert drafts == [_as_draft(ev) for ev in events] == drafts_of(events)


def test_batches_cover_every_draft_in_order_within_their_limits(source: Path) -> None:
    _, _, drafts, _ = read_session_file(source)
    cut = batches(drafts * 40, 3)
    assert [d for b in cut for d in b.drafts] == (drafts * 40)[3:]
    assert cut[0].first == 3 and all(b.last + 1 == c.first for b, c in itertools.pairwise(cut))
    assert all(len(b.drafts) <= BATCH_MAX_EVENTS for b in cut)
    assert max(len(b.drafts) for b in cut) == BATCH_MAX_EVENTS
    assert BATCH_MAX_JSON_BYTES > 0


def test_the_commands_carry_the_batches(source: Path) -> None:
    _, _, drafts, digest = read_session_file(source)
    plan = Plan.of(drafts, "target", "client-x", digest, "~run1")
    for b, value in plan.planned():
        command = decode_command(value)
        assert command.client_id == "client-x" and command.expected_seq == b.first
        rid = f"import:{digest[:32]}~run1:target:{b.first}:{len(b.drafts)}"
        assert command.request_id == rid
        assert [dict(d)["type"] for d in command.events] == [d["type"] for d in b.drafts]


def test_the_size_check_refuses_the_first_event_over_the_limit(source: Path) -> None:
    _, events, drafts, digest = read_session_file(source)
    plan = Plan.of(drafts, "t", "c", digest)
    check_sizes("t", events, plan.planned(), 1 << 18, "f.jsonl")  # all well under
    sizes = [len(encode_event(ev.to_json(), "t")) for ev in events]
    limit = max(sizes) - 1
    with pytest.raises(PayloadTooLargeError, match=f"seq {sizes.index(max(sizes))} ") as info:
        check_sizes("t", events, plan.planned(), limit, "f.jsonl")
    assert info.value.code == "EVENT_TOO_LARGE" and "nothing was published" in info.value.message
    check_sizes("t", events, plan.planned(), max(sizes), "f.jsonl")  # exactly at the limit


def test_a_command_over_the_limit_is_split_in_halves(
    source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, drafts, digest = read_session_file(source)
    whole = Plan.of(drafts, "t", "c", digest)
    monkeypatch.setattr(import_plan, "COMMAND_MAX_BYTES", max(map(len, whole.commands)) // 3)
    split = Plan.of(drafts, "t", "c", digest)
    assert len(split.batches) > len(whole.batches)
    assert [d for b in split.batches for d in b.drafts] == drafts
    assert all(len(c) <= import_plan.COMMAND_MAX_BYTES for c in split.commands)


def test_the_file_is_read_as_read_jsonl_reads_it_only_newline_ends_a_line(source: Path) -> None:
    # A bare carriage return is JSON whitespace: it may sit between any two tokens.
    source.write_bytes(source.read_bytes().replace(b',"seq":', b',\r"seq":'))
    assert b"\r" in source.read_bytes()
    _, events, _, _ = read_session_file(source)
    assert events == dsh.formats.read_jsonl(source)[1]


def test_each_run_is_a_new_attempt_with_request_ids_of_its_own() -> None:
    """The writer answers a rejected request id with its first answer for good: a re-run
    (after the writer was fixed) must not reuse the ids of the run it rejected."""
    first, second = new_attempt(), new_attempt()
    assert first != second
    assert request_id("h" * 64, "s", 0, 3, first) != request_id("h" * 64, "s", 0, 3, second)
