"""Apache Avro's Java library decodes our single-object bytes with nothing but the .avsc files.

The test builds a tiny reader (tests/integration/java/AvroDecode.java) against Avro from Maven
Central, feeds it our bytes, and compares the JSON it prints with the Python view of the same
bytes. Jars and classes are cached under .state/avro-java/, so only the first run pays for
Maven. Skipped only when java, javac or mvn is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from schemas.store import SCHEMA_DIR, SCHEMA_FILES, SESSION_EVENT
from tests.unit.test_codec_evolution import NEW, OLD_ROLLED_OUT
from tests.unit.test_codec_roundtrip import any_events, drafts, session_ids, text

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = Path(__file__).resolve().parent / "java"
STATE = ROOT / ".state" / "avro-java"

JavaRun = Callable[..., tuple[dict[str, str], list[Any]]]


@pytest.fixture(scope="module")
def java_decode(tmp_path_factory: pytest.TempPathFactory) -> JavaRun:
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: cannot build the Avro Java reader")
    libs = STATE / "libs"
    if not any(libs.glob("avro-*.jar")):
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-f",
                str(JAVA_DIR / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={libs}",
            ],
            check=True,
            timeout=600,
        )
    classes = STATE / "classes"
    source = JAVA_DIR / "AvroDecode.java"
    compiled = classes / "AvroDecode.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["javac", "-d", str(classes), "-cp", f"{libs}/*", str(source)],
            check=True,
            timeout=300,
        )
    tmp = tmp_path_factory.mktemp("avro-java")

    def run(
        records: Sequence[tuple[str, bytes]], writer_only: Sequence[dict[str, Any]] = ()
    ) -> tuple[dict[str, str], list[Any]]:
        extra: list[str] = []
        for i, schema in enumerate(writer_only):
            path = tmp / f"writer_only_{i}.avsc"
            path.write_text(json.dumps(schema), encoding="utf-8")
            extra.append(str(path))
        proc = subprocess.run(
            [
                "java",
                "-cp",
                f"{classes}:{libs}/*",
                "AvroDecode",
                str(SCHEMA_DIR),
                *SCHEMA_FILES,
                *(["--writer-only", *extra] if extra else []),
            ],
            input="".join(f"{name} {data.hex()}\n" for name, data in records),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=300,
            check=True,
        )
        # Not splitlines(): it also splits on U+2028, U+0085 and friends inside strings.
        lines = [line for line in proc.stdout.split("\n") if line]
        return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]

    return run


def python_view(data: bytes, codec: schemas.Codec | None = None) -> Any:
    return (codec or schemas.Codec()).decode(data)[1]


def test_fingerprints_agree(java_decode: JavaRun) -> None:
    fingerprints, _ = java_decode([])
    ours = {m.name: m.fingerprint_hex for m in schemas.default_store().schemas()}
    assert fingerprints == ours


def test_java_decodes_the_golden_vectors(java_decode: JavaRun) -> None:
    vectors = json.loads((SCHEMA_DIR / "vectors" / "vectors.json").read_text(encoding="utf-8"))
    records = [(v["schema"], bytes.fromhex(v["hex"])) for v in vectors["vectors"]]
    _, decoded = java_decode(records)
    assert decoded == [v["value"] for v in vectors["vectors"]]


def test_java_decodes_generated_records(java_decode: JavaRun) -> None:
    records: list[tuple[str, bytes]] = []

    @settings(
        max_examples=200,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(
        ev=any_events,
        session_id=session_ids,
        batch=st.lists(drafts(), max_size=3),
        ids=st.tuples(text, text),
    )
    def collect(
        ev: dict[str, Any], session_id: str, batch: list[dict[str, Any]], ids: tuple[str, str]
    ) -> None:
        records.append((SESSION_EVENT, schemas.encode_event(ev, session_id)))
        command = schemas.AppendCommand(*ids, session_id, tuple(batch), expected_seq=ev["seq"])
        records.append((schemas.APPEND_COMMAND, schemas.encode_command(command)))
        reply = schemas.AppendReply.committed(*ids, session_id, [ev])
        records.append((schemas.APPEND_REPLY, schemas.encode_reply(reply)))
        snapshot = schemas.WriterSnapshot(session_id, (ev,), state=ev["data"])
        records.append((schemas.WRITER_SNAPSHOT, schemas.encode_snapshot(snapshot)))

    collect()
    _, decoded = java_decode(records)
    assert len(decoded) == len(records)
    for (name, data), java in zip(records, decoded, strict=True):
        assert java == python_view(data), name


def test_java_resolves_a_newer_writer_schema(java_decode: JavaRun) -> None:
    """Bytes written with v2 (an added optional field) read by Java into v1, like our v1."""
    event = {"type": "turn/start", "seq": 1, "time": 2, "data": {"turn": 1}, "traceId": "t-1"}
    data = schemas.encode_event(event, "s", codec=NEW)
    v2 = NEW.store.current(SESSION_EVENT).schema
    _, decoded = java_decode([(SESSION_EVENT, data)], writer_only=[v2])
    assert decoded == [python_view(data, OLD_ROLLED_OUT)]
    assert "traceId" not in decoded[0]


def test_java_refuses_an_unknown_fingerprint(java_decode: JavaRun) -> None:
    data = schemas.encode_event({"type": "turn/start", "seq": 1, "time": 2, "data": {}}, "s")
    forged = data[:2] + bytes(8) + data[10:]
    _, decoded = java_decode([(SESSION_EVENT, forged)])
    assert "MissingSchemaException" in decoded[0]["javaError"]
    with pytest.raises(schemas.UnknownFingerprintError):
        schemas.decode_event(forged)
