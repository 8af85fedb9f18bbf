"""`dsh import` checks a file with the interpreters the writer has, before publishing."""

from __future__ import annotations

import pytest

import dsh
from interpreters import OFFLOAD_SPEC
from producers.importer import validate_locally
from servicekit.interpreters import parse_interpreters


def _offloaded_session() -> tuple[dsh.Event, ...]:
    session = dsh.Session.create("imp", invariants=False)
    session.register_message_projection(
        "image/offload", parse_interpreters(OFFLOAD_SPEC)["image/offload"]
    )
    image = {"type": "image", "mediaType": "image/png", "data": "iVBORw0KGgo="}
    session.append(
        "user/message",
        {"id": "u1", "role": "user", "content": [image], "source": {"kind": "user"}},
        surface_op="append",
    )
    session.append("image/offload", {"seqs": [0], "ref": "blob://1"})
    return session.events()


def test_a_file_with_message_projections_passes_with_the_writers_interpreters() -> None:
    validate_locally("imp", _offloaded_session(), "f.jsonl", parse_interpreters(OFFLOAD_SPEC))


def test_without_the_interpreter_it_is_refused_naming_the_seq() -> None:
    with pytest.raises(dsh.RestoreError, match="seq 1") as info:
        validate_locally("imp", _offloaded_session(), "f.jsonl")
    assert info.value.index == 1
