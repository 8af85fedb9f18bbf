"""Bad bytes and bad values give typed codec errors, never a crash, a guess or a silent loss."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from dsh.errors import SessionError, ValidationError, error_from_wire
from dsh.json_snapshot import MAX_DEPTH
from schemas import native
from schemas.store import default_store
from tests.unit.test_codec_roundtrip import any_events

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EVENT = {"type": "turn/start", "seq": 3, "time": 1700000000000, "data": {"turn": 1}}
KNOWN_HEADERS = [m.header for m in default_store().schemas()]


def good_bytes() -> bytes:
    return schemas.encode_event(EVENT, "sess-1")


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", schemas.BadMarkerError),
        (b"\xc3", schemas.BadMarkerError),
        (b'{"type": "turn/start"}', schemas.BadMarkerError),
        (b"Obj\x01", schemas.BadMarkerError),  # an Avro container file is not a single object
        (b"\xc3\x01\x00\x00", schemas.CorruptRecordError),  # header cut short
        (b"\xc3\x01" + b"\x00" * 8, schemas.UnknownFingerprintError),
        (
            b"\xc3\x01" + bytes.fromhex("8f5c393f1ad57572") + b"\x02",
            schemas.UnknownFingerprintError,
        ),
    ],
)
def test_bad_framing(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        schemas.decode_event(data)


def test_unknown_fingerprint_is_typed_and_named() -> None:
    data = b"\xc3\x01" + bytes.fromhex("0123456789abcdef") + b"\x00"
    with pytest.raises(schemas.UnknownFingerprintError) as exc:
        schemas.decode_event(data)
    assert exc.value.code == "CODEC_UNKNOWN_FINGERPRINT"
    assert exc.value.fingerprint == "0123456789abcdef"
    assert "0123456789abcdef" in str(exc.value)
    assert isinstance(exc.value, SessionError)


def test_every_cut_of_a_record_is_corrupt() -> None:
    data = schemas.encode_event(
        {"type": "x/y", "seq": 1, "time": 2, "data": {"a": [1, 2.5, "é", None]}, "ignorable": True},
        "s",
    )
    for cut in range(10, len(data)):
        with pytest.raises(schemas.CorruptRecordError):
            schemas.decode_event(data[:cut])


def test_trailing_bytes_are_corrupt() -> None:
    with pytest.raises(schemas.CorruptRecordError, match="trailing"):
        schemas.decode_event(good_bytes() + b"\x00")


def test_wrong_record_kind_is_a_schema_mismatch() -> None:
    cmd = schemas.encode_command(schemas.AppendCommand("r", "c", "s", ()))
    with pytest.raises(schemas.SchemaMismatchError):
        schemas.decode_event(cmd)
    with pytest.raises(schemas.SchemaMismatchError):
        schemas.decode_command(good_bytes())


@FUZZ
@given(body=st.binary(max_size=200), header=st.sampled_from(KNOWN_HEADERS))
def test_garbage_after_a_known_header_is_a_codec_error(body: bytes, header: bytes) -> None:
    try:
        name, _ = schemas.Codec().decode(header + body)
    except schemas.CodecError:
        return
    assert name  # garbage that happens to be a valid record decodes to some wire JSON


@FUZZ
@given(data=st.binary(max_size=64))
def test_random_bytes_are_a_codec_error(data: bytes) -> None:
    with pytest.raises(schemas.CodecError):
        schemas.decode_event(data)
    with pytest.raises(schemas.CodecError):
        schemas.decode_event(b"\xc3\x01" + data)


@FUZZ
@given(ev=any_events, data=st.data())
def test_corrupted_records_are_a_codec_error_or_decode(
    ev: dict[str, Any], data: st.DataObject
) -> None:
    encoded = bytearray(schemas.encode_event(ev, "sess"))
    how = data.draw(st.sampled_from(["flip", "cut", "insert", "fingerprint"]))
    if how == "flip":
        i = data.draw(st.integers(10, len(encoded) - 1))
        encoded[i] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        encoded = encoded[: data.draw(st.integers(0, len(encoded) - 1))]
    elif how == "insert":
        i = data.draw(st.integers(10, len(encoded)))
        encoded[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    else:
        i = data.draw(st.integers(2, 9))
        encoded[i] ^= data.draw(st.integers(1, 255))
    try:
        record = schemas.decode_event(bytes(encoded))
    except schemas.CodecError as e:
        if how == "cut":
            assert isinstance(e, (schemas.CorruptRecordError, schemas.BadMarkerError))
        if how == "fingerprint":
            assert isinstance(e, schemas.UnknownFingerprintError)
        return
    assert how in ("flip", "insert")  # a flipped byte can still spell a valid record
    assert isinstance(record.event, dict)


@pytest.mark.parametrize(
    "data",
    [
        math.nan,
        math.inf,
        {"a": [1, -math.inf]},
        {1: "int key"},
        {"k": b"bytes"},
        {"k": {1, 2}},
        {"k": object()},
        "lone \ud800 surrogate",
        {"k": ["x\udfff"]},
    ],
)
def test_values_that_are_not_lossless_json_are_unencodable(data: Any) -> None:
    with pytest.raises(schemas.UnencodableError):
        schemas.encode_event({"type": "x/y", "seq": 0, "time": 0, "data": data}, "s")


@pytest.mark.parametrize(
    "event",
    [
        {"type": "turn/start", "seq": 0, "time": 0},  # no data
        {"type": "turn/start", "seq": -1.5, "time": 0, "data": {}},
        {"type": "turn/start", "seq": 2**63, "time": 0, "data": {}},
        {"type": 7, "seq": 0, "time": 0, "data": {}},
        {"type": "turn/start", "seq": 0, "time": 0, "data": {}, "extra": 1},
        {"type": "turn/start", "seq": 0, "time": 0, "data": {}, "sessionId": "x"},
        {"type": "turn/start", "seq": 0, "time": 0, "data": {}, "ignorable": "yes"},
    ],
)
def test_bad_envelopes_are_unencodable(event: dict[str, Any]) -> None:
    with pytest.raises(schemas.UnencodableError):
        schemas.encode_event(event, "s")


def test_codec_errors_cross_the_wire() -> None:
    for cls in (
        schemas.CodecError,
        schemas.BadMarkerError,
        schemas.UnknownFingerprintError,
        schemas.CorruptRecordError,
        schemas.SchemaMismatchError,
        schemas.UnencodableError,
    ):
        err = cls("boom")
        assert issubclass(cls, SessionError)
        assert err.code.startswith("CODEC")
        rebuilt = error_from_wire(err.to_wire())
        assert type(rebuilt) is cls and rebuilt.code == err.code
        assert type(pickle.loads(pickle.dumps(err))) is cls


# Decodes records nested ``depth`` deep, each way the codec can read them, and prints one line
# per case: ``ok``, or the error's class and code. Run in a child process so that a reader
# overflowing the C stack (exit 139) fails the test instead of killing pytest.
_NESTED = """
import sys
import schemas
from schemas import native
from schemas.codec import Codec
from schemas.store import default_store
from schemas.writers import compile_writer

native.configure(sys.argv[1] == "on")
depths = [int(d) for d in sys.argv[2:]]
store = default_store()
old = next(m for m in store.schemas()
           if m.name == "dsh.v1.SessionEvent" and store.current(m.name) is not m)
event = {"type": "x/y", "seq": 0, "time": 1, "data": "MARK", "ignorable": True}
records = {
    "current": schemas.encode_event(event, "s"),
    "older writer": compile_writer(old.schema, old.header)(
        {**event, "sessionId": "s", "formatVersion": 3}
    ),
}
def nested_arrays(record, depth):  # data: [[[...]]], a one-item array per level (0c 02)
    i = record.index(b"\\x08\\x08MARK")
    return record[:i] + b"\\x0c\\x02" * depth + b"\\x00" + b"\\x00" * depth + record[i + 6:]
def nested_results(depth):  # a tool-result block in a tool-result block, ``depth`` deep
    block = {"type": "text", "text": "x"}
    for _ in range(depth):
        block = {"type": "tool-result", "toolCallId": "c", "content": [block], "isError": False}
    message = {"id": "u", "role": "user", "content": [block], "source": {"kind": "user"}}
    return schemas.encode_event(
        {"type": "user/message", "seq": 0, "time": 1, "data": message, "surfaceOp": "append"}, "s"
    )
sys.setrecursionlimit(10**6)  # to encode the tool results; reset before decoding
cases = [(f"{name} arrays", d, nested_arrays(r, d)) for name, r in records.items() for d in depths]
cases += [("tool results", d, nested_results(d)) for d in depths if d < 1000]
sys.setrecursionlimit(1000)
codec = Codec()
print(native.describe(), flush=True)
for name, depth, data in cases:
    for decode in (codec.decode, codec.decode_frozen):
        try:
            decode(data)
            outcome = "ok"
        except Exception as e:
            outcome = f"{type(e).__name__} {getattr(e, 'code', '')}"
        print(f"{name} {depth} {decode.__name__}: {outcome}", flush=True)
"""


@pytest.mark.parametrize("native_readers", ["on", "off"])
def test_nesting_deeper_than_the_core_allows_is_corrupt_with_either_reader(
    native_readers: str,
) -> None:
    if native_readers == "on" and not native.available():
        pytest.skip("no native build here")
    # 128 nested arrays is the core's MAX_DEPTH: the deepest data it accepts; the ~400 KB of
    # 200,000 used to overflow the native reader's stack, 20,000 it used to return.
    depths = [128, 129, 600, 20_000, 200_000]
    ran = subprocess.run(
        [sys.executable, "-c", _NESTED, native_readers, *map(str, depths)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, f"exit {ran.returncode}: {ran.stdout[-2000:]}{ran.stderr[-2000:]}"
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("native" if native_readers == "on" else "Python"), lines[0]
    corrupt = "CorruptRecordError CODEC_CORRUPT"
    expected = [
        f"{name} {depth} {how}: {'ok' if depth <= 128 else corrupt}"
        for name in ("current arrays", "older writer arrays")
        for depth in depths
        for how in ("decode", "decode_frozen")
    ]
    expected += [
        # a tool-result block holds the next: at most 128 inside the outermost one (the core
        # refuses any nesting of tool results; the codec only stops what could crash it)
        f"tool results {depth} {how}: {'ok' if depth <= 129 else corrupt}"
        for depth in depths
        if depth < 1000
        for how in ("decode", "decode_frozen")
    ]
    assert lines[1:] == expected


def test_json_nested_deeper_than_the_core_allows_is_unencodable() -> None:
    # Symmetric with the readers: a command the writer could not decode is never sent, and the
    # client raises the core's own error for it instead of waiting on a dead-lettered command.
    from producers.client import _as_the_core_would

    def nested(n: int) -> Any:
        value: Any = "leaf"
        for _ in range(n):
            value = [value]
        return value

    event = {"type": "x/y", "seq": 0, "time": 1, "ignorable": True}
    schemas.encode_event({**event, "data": nested(MAX_DEPTH)}, "s")
    with pytest.raises(schemas.UnencodableError) as info:
        schemas.encode_event({**event, "data": nested(MAX_DEPTH + 1)}, "s")
    core = _as_the_core_would(info.value, [{"type": "x/y", "data": nested(MAX_DEPTH + 1)}])
    assert type(core) is ValidationError and core.code == "JSON_TOO_DEEP"
