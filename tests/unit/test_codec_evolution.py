"""Schema evolution through Avro reader/writer resolution, both directions.

``SESSION_EVENT_V2`` is the shipped ``session_event.avsc`` plus one optional field, the change
a later version of the envelope would make. Readers decode any writer version they know into
their own version; a version they do not know is a typed error.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from schemas.store import SCHEMA_DIR, SCHEMA_FILES, SESSION_EVENT, SchemaStore
from tests.unit.test_codec_roundtrip import any_events

V1 = json.loads((SCHEMA_DIR / "session_event.avsc").read_text())
SESSION_EVENT_V2: dict[str, Any] = copy.deepcopy(V1)
SESSION_EVENT_V2["fields"].append(
    {"name": "traceId", "type": ["null", "string"], "default": None, "doc": "W3C trace id."}
)


def store(v2: str | None) -> SchemaStore:
    """The packaged store; plus v2 as the reader schema ("reader") or as known writer only."""
    s = SchemaStore.from_files(SCHEMA_DIR / f for f in SCHEMA_FILES)
    if v2 is not None:
        s.add(SESSION_EVENT_V2, source="session_event.v2 (test)", reader=v2 == "reader")
    return s


OLD = schemas.Codec(store(None))  # knows v1 only
OLD_ROLLED_OUT = schemas.Codec(store("writer"))  # reads into v1, knows v2's fingerprint
NEW = schemas.Codec(store("reader"))  # writes and reads v2

EVENT = {
    "type": "tool/call",
    "seq": 4,
    "time": 1700000000000,
    "data": {"turn": 1, "step": 1, "callId": "c1", "name": "ls", "arguments": "{}"},
}


def test_v2_is_a_new_fingerprint_of_the_same_record() -> None:
    v1 = OLD.store.current(SESSION_EVENT)
    v2 = NEW.store.current(SESSION_EVENT)
    assert v1.name == v2.name and v1.fingerprint != v2.fingerprint
    assert OLD_ROLLED_OUT.store.current(SESSION_EVENT) is not None
    assert OLD_ROLLED_OUT.store.current(SESSION_EVENT).fingerprint == v1.fingerprint


def test_new_writer_old_reader() -> None:
    data = schemas.encode_event({**EVENT, "traceId": "4bf92f35"}, "s", codec=NEW)
    assert data[2:10] == NEW.store.current(SESSION_EVENT).fingerprint
    # The old reader drops the field it does not know; everything else is intact.
    assert schemas.decode_event(data, codec=OLD_ROLLED_OUT).event == EVENT
    # The new reader sees it.
    assert schemas.decode_event(data, codec=NEW).event == {**EVENT, "traceId": "4bf92f35"}


def test_old_writer_new_reader() -> None:
    data = schemas.encode_event(EVENT, "s", codec=OLD)
    assert data[2:10] == OLD.store.current(SESSION_EVENT).fingerprint
    # The new field takes its default (null: absent).
    assert schemas.decode_event(data, codec=NEW).event == EVENT


def test_reader_that_never_saw_the_new_version_refuses_it() -> None:
    data = schemas.encode_event(EVENT, "s", codec=NEW)
    with pytest.raises(schemas.UnknownFingerprintError):
        schemas.decode_event(data, codec=OLD)


PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(ev=any_events, trace=st.none() | st.text(max_size=20))
def test_any_event_both_directions(ev: dict[str, Any], trace: str | None) -> None:
    v2_event = ev if trace is None else {**ev, "traceId": trace}
    new_bytes = schemas.encode_event(v2_event, "s", codec=NEW)
    assert schemas.decode_event(new_bytes, codec=OLD_ROLLED_OUT).event == ev
    old_bytes = schemas.encode_event(ev, "s", codec=OLD)
    assert schemas.decode_event(old_bytes, codec=NEW).event == ev
    # Same-version reads are unchanged by the store knowing other versions.
    assert schemas.decode_event(old_bytes, codec=OLD_ROLLED_OUT).event == ev


def test_replies_embedding_events_still_decode_for_both() -> None:
    reply = schemas.AppendReply.committed("r", "c", "s", [EVENT])
    for writer in (OLD, NEW):
        for reader in (OLD_ROLLED_OUT, NEW):
            data = schemas.encode_reply(reply, codec=writer)
            assert schemas.decode_reply(data, codec=reader) == reply
