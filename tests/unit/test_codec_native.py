"""The Cython build of the codec's readers (``schemas/native.py``): built for every reader of the
packaged schemas, and indistinguishable from the Python readers it is built from — the same
values, frozen or plain, and the same errors on truncated or damaged bytes."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import schemas
from schemas import avro_read, native
from schemas.codec import Codec
from schemas.errors import CodecError
from schemas.frames import draft_reader_schema
from schemas.native_build import collect_readers, module_source
from schemas.readers import compile_reader
from schemas.store import SESSION_EVENT
from tests.unit.test_codec_roundtrip import PROPS, any_events, session_ids

pytest.importorskip("Cython", reason="the native extra is not installed: nothing is built")


def _built() -> Any:
    try:
        return importlib.import_module(native.MODULE)
    except ImportError:
        pytest.fail("schemas/_native_codec is not built: run `make setup`")


def _warmed(codec: Codec, data: bytes) -> Codec:
    """Compile ``codec``'s plain and frozen readers of ``data``'s schema now."""
    codec.decode(data)
    codec.decode_frozen(data)
    return codec


SAMPLE = schemas.encode_event(
    {"type": "turn/start", "seq": 0, "time": 1700000000000, "data": {"turn": 1}},
    "s",
)


def _pair() -> tuple[Codec, Codec]:
    """(native, python): two codecs whose event readers are compiled each way."""
    with native.disabled():
        python = _warmed(Codec(), SAMPLE)
    return _warmed(Codec(), SAMPLE), python


NATIVE, PYTHON = _pair()


def test_every_reader_of_the_packaged_schemas_is_in_the_build() -> None:
    readers = collect_readers()
    assert len(readers) > 50
    missing = {r.key for r in readers} - set(_built().FACTORIES)
    assert not missing, f"{len(missing)} readers not in the build: run `make setup`"


def test_the_codec_decodes_with_the_native_readers_unless_disabled() -> None:
    fingerprint = SAMPLE[2:10]
    assert type(NATIVE._reader(fingerprint).read).__name__ == "cython_function_or_method"
    assert type(PYTHON._reader(fingerprint).read).__name__ == "function"


def test_the_native_readers_call_the_compiled_read_primitives() -> None:
    compiled = native.read_primitives()
    assert compiled is _built()
    for name in ("read_long", "read_str", "read_block_count", "read_json_value"):
        assert type(getattr(compiled, name)).__name__ == "cython_function_or_method", name
    with native.disabled():
        assert native.read_primitives() is avro_read


def test_primitives_built_from_another_source_are_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A build left from an older schemas/avro_read.py would read bytes by old rules: the codec
    takes the Python module, says so, and the build check fails."""
    from schemas import native_build

    edited = native.primitives_source() + "\n# edited since the build\n"
    monkeypatch.setattr(native, "_primitives_key", native.primitives_key(edited))
    assert native.read_primitives() is avro_read
    assert "read primitives Python: stale build" in native.describe()
    monkeypatch.setattr(native_build, "primitives_source", lambda: edited)
    ok, message = native_build.check()
    assert not ok and "avro_read.py" in message


def test_the_module_source_holds_the_primitives_and_their_key() -> None:
    primitives = "def read_long(data, pos):\n    return 0, pos\n"
    text = module_source([], primitives)
    assert primitives in text
    assert f"PRIMITIVES_KEY = {native.primitives_key(primitives)!r}" in text


def test_a_build_that_binds_a_name_the_codec_no_longer_has_falls_back_to_python() -> None:
    reader = next(r for r in collect_readers() if "FD" in r.names)
    ns = {name: object() for name in reader.names if name != "FD"}
    assert native.compiled(reader.fn, reader.args, reader.body, ns) is None
    ns["FD"] = object()
    assert native.compiled(reader.fn, reader.args, reader.body, ns) is not None


def test_the_module_source_names_each_reader_by_its_source() -> None:
    readers = collect_readers()[:2]
    text = module_source(readers)
    for r in readers:
        assert f"{r.key!r}: _make_" in text
        assert all(line in text for line in r.body)


@PROPS
@given(ev=any_events, session_id=session_ids)
def test_native_and_python_readers_decode_the_same_values(
    ev: dict[str, Any], session_id: str
) -> None:
    data = schemas.encode_event(ev, session_id)
    assert NATIVE.decode(data, SESSION_EVENT) == PYTHON.decode(data, SESSION_EVENT)
    native_frozen = NATIVE.decode_frozen(data, SESSION_EVENT)[1]
    python_frozen = PYTHON.decode_frozen(data, SESSION_EVENT)[1]
    assert native_frozen == python_frozen
    assert [type(v) for v in native_frozen.values()] == [type(v) for v in python_frozen.values()]


def _outcome(codec: Codec, data: bytes, frozen: bool) -> Any:
    try:
        return codec.decode_frozen(data) if frozen else codec.decode(data)
    except CodecError as exc:
        return type(exc)


@PROPS
@given(ev=any_events, cut=st.integers(min_value=10), flip=st.data(), frozen=st.booleans())
def test_damaged_bytes_fail_the_same_way_in_both(
    ev: dict[str, Any], cut: int, flip: st.DataObject, frozen: bool
) -> None:
    data = schemas.encode_event(ev, "s")
    truncated = data[: 10 + cut % (len(data) - 9)]
    assert _outcome(NATIVE, truncated, frozen) == _outcome(PYTHON, truncated, frozen)
    at = flip.draw(st.integers(min_value=10, max_value=len(data) - 1))
    byte = flip.draw(st.integers(min_value=0, max_value=255))
    damaged = data[:at] + bytes([byte]) + data[at + 1 :]
    assert _outcome(NATIVE, damaged, frozen) == _outcome(PYTHON, damaged, frozen)


_FIRST_DECODE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
from servicekit.settings import configure_codec
import schemas
configure_codec()
data = schemas.encode_event({"type": "turn/start", "seq": 0, "time": 1, "data": {}}, "s")
schemas.decode_event(data)
schemas.decode_event_frozen(data)
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("auto", "schemas.native codec readers: native ("),
        ("off", "schemas.native codec readers: Python (the native readers are turned off"),
    ],
)
def test_a_process_logs_once_which_readers_it_decodes_with(setting: str, expected: str) -> None:
    _built()
    env = {**os.environ, "DSH_CODEC_NATIVE": setting}
    ran = subprocess.run(
        [sys.executable, "-c", _FIRST_DECODE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [line for line in ran.stdout.splitlines() if "codec readers" in line]
    assert len(lines) == 1 and lines[0].startswith(expected), ran.stdout + ran.stderr


def test_the_writers_draft_reader_is_in_the_build() -> None:
    # The writer reads each draft of a command as a root record (schemas.frames): without
    # its own entry that root would be the Python reader in every process.
    draft = draft_reader_schema()
    assert draft is not None
    with native.recording() as sources:
        compile_reader(draft, frozen=True)
    root = sources[-1]  # nested records are generated first, the root last
    assert "return out, pos" in root.body  # a root: its own dict stays plain
    assert root.key in _built().FACTORIES


def test_a_build_made_before_is_copied_from_the_cache_and_the_cache_keeps_the_newest(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiler runs only for a build the cache does not hold (other source or flags)."""
    from schemas import native_build

    compiled: list[str] = []

    def compile_stub(source: str, optimize: str, tmp: Any) -> Any:
        compiled.append(optimize)
        out = tmp / "_native_codec.cpython-test.so"
        out.write_text(optimize)
        return out

    monkeypatch.setattr(native_build, "_compile", compile_stub)
    target, cache = tmp_path / "target", tmp_path / "cache"
    target.mkdir()
    (target / "_native_codec.stale.so").write_text("stale")

    first, cached = native_build.build(target, "-O1", cache)
    assert (compiled, cached) == (["-O1"], False)
    assert [p.name for p in target.iterdir()] == [first.name] and first.read_text() == "-O1"
    first.unlink()
    again, cached = native_build.build(target, "-O1", cache)
    assert (compiled, cached) == (["-O1"], True) and again.read_text() == "-O1"

    for flags in ("-O0", "-O2", "-O3"):
        native_build.build(target, flags, cache)
    assert compiled == ["-O1", "-O0", "-O2", "-O3"]
    assert sorted(p.read_text() for p in cache.glob("*/_native_codec*")) == ["-O0", "-O2", "-O3"]
