"""`dsh import` and `dsh export` against the real broker and a writer: files of every format
version arrive as the sessions `read_jsonl` gives; export → re-import is lossless; a re-run of
an export adds nothing, an export after new events adds only their ranges, and a run that
crashes before or after its commit point never duplicates a record; each error path names its
fix."""

from __future__ import annotations

import importlib.util
import itertools
import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest

import dsh
from cli import main
from deploy.local.processes import free_ports
from dsh.formats import read_jsonl, write_jsonl
from dsh.restore import restore
from producers import InvariantsModeError, PayloadTooLargeError, SessionClient
from producers.importer import (
    ImportRejectedError,
    SessionExistsError,
    SessionImportError,
    import_file,
)
from projectors import export as export_mod
from projectors.export import (
    MANIFEST,
    ExportBusyError,
    ExportManifestError,
    export,
    read_export,
)
from projectors.records import Record
from projectors.topic_reader import scan_partitions
from schemas import draft
from servicekit.settings import KafkaSettings
from tests.conftest import TEST_PARTITIONS, Servers
from tests.integration.writer_support import (
    run_script_in_process,
    running_writer,
    without_time,
    writer_settings,
)
from tests.support.builders import assistant, user
from tests.support.dsh_vectors import SCENARIOS, VECTORS, invariants_of
from tests.support.topics import fresh_topics

FORMATS = Path(__file__).resolve().parents[1] / "unit" / "data" / "formats"
# Small enough that one oversized event is cheap to build; the writer refuses it, not the core.
MAX_EVENT_BYTES = 20_000


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def _v2_lines(session_id: str) -> list[dict[str, Any]]:
    """A v2 file: the prompt in request/header.header.system (changed once, mid-turn), an
    empty tools list, and a {op,start,end} replace citing what it hides."""
    call = {"type": "tool-call", "id": "c1", "name": "echo", "arguments": "{}"}
    model = {"kind": "model", "provider": "mock", "model": "m1"}
    result_block = {
        "type": "tool-result",
        "toolCallId": "c1",
        "content": [_text("42")],
        "isError": False,
    }
    events: list[dict[str, Any]] = [
        {"type": "turn/start", "data": {"turn": 1}},
        {"type": "step/start", "data": {"turn": 1, "step": 1}},
        {"type": "user/message", "data": user("u1", "weather?"), "surfaceOp": "append"},
        {
            "type": "request/header",
            "data": {"header": {"config": {}, "system": "Be brief.", "tools": []}, "reason": "x"},
        },
        {
            "type": "assistant/message",
            "data": {
                "turn": 1,
                "step": 1,
                "message": {
                    "id": "a1",
                    "role": "assistant",
                    "content": [_text("looking"), call],
                    "source": model,
                },
                "stream": [{"t": 0, "kind": "text", "text": "looking"}],
            },
            "surfaceOp": "append",
        },
        {
            "type": "tool/call",
            "data": {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"},
        },
        {
            "type": "tool/result",
            "data": {
                "turn": 1,
                "step": 1,
                "message": {
                    "id": "r1",
                    "role": "user",
                    "content": [result_block],
                    "source": {"kind": "tool", "callId": "c1"},
                },
            },
            "surfaceOp": "append",
            "sourceEventSeqs": [5],
        },
        {"type": "step/end", "data": {"turn": 1, "step": 1}},
        {"type": "step/start", "data": {"turn": 1, "step": 2}},
        {
            "type": "request/header",
            "data": {"header": {"config": {}, "system": "Be very brief."}, "reason": "x"},
        },
        {
            "type": "assistant/message",
            "data": {
                "turn": 1,
                "step": 2,
                "message": {
                    "id": "a2",
                    "role": "assistant",
                    "content": [_text("42")],
                    "source": model,
                },
                "stream": [{"t": 0, "kind": "text", "text": "42"}],
            },
            "surfaceOp": "append",
        },
        {"type": "step/end", "data": {"turn": 1, "step": 2}},
        {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
        {"type": "turn/start", "data": {"turn": 2}},
        {
            "type": "user/message",
            "data": user("sum", "asked, looked, got 42"),
            "surfaceOp": {"op": "replace", "start": 4, "end": 6},
            "sourceEventSeqs": [4, 6],
        },
        {"type": "turn/end", "data": {"turn": 2, "reason": {"kind": "completed"}}},
    ]
    header = {"type": "session", "version": 2, "id": session_id, "createdAt": 3000}
    return [header] + [{**e, "seq": i, "time": 3000 + i} for i, e in enumerate(events)]


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _v3_file(path: Path, session_id: str) -> Path:
    """A native v3 file: the writer tests' multi-turn script (a compaction replace included)."""
    session = dsh.Session.create(session_id)
    run_script_in_process(session)
    write_jsonl(path, session_id, session.events())
    return path


@pytest.fixture(scope="module")
def kafka(servers: Servers) -> KafkaSettings:
    """One topic prefix for the module: a writer takes seconds to own its partitions, so the
    tests share one and use their own session ids (export tests count what they add)."""
    settings = fresh_topics(servers.bootstrap_servers, TEST_PARTITIONS, "test-io")
    return settings


@pytest.fixture(scope="module")
def writer(kafka: KafkaSettings) -> Iterator[None]:
    with running_writer(kafka, writer_settings(max_event_bytes=MAX_EVENT_BYTES)):
        yield


@pytest.fixture(scope="module")
def client(kafka: KafkaSettings, writer: None) -> Iterator[SessionClient]:
    with SessionClient(settings=kafka, timeout=20) as c:
        yield c


@pytest.fixture
def cli_env(kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> KafkaSettings:
    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    monkeypatch.setenv("DSH_KAFKA_TOPIC_PREFIX", kafka.topic_prefix)
    return kafka


def _too_big_for_the_writer(tmp_path: Path) -> Path:
    """A session file valid for the core whose second event is over MAX_EVENT_BYTES: only a
    writer with that limit refuses it."""
    lines = [
        {"type": "session", "version": 3, "id": "big", "createdAt": 1},
        {"type": "user/message", "seq": 0, "time": 1, "data": user("u0"), "surfaceOp": "append"},
        {
            "type": "user/message",
            "seq": 1,
            "time": 2,
            "data": user("u1", "x" * (MAX_EVENT_BYTES + 1000)),
            "surfaceOp": "append",
        },
    ]
    return _write_lines(tmp_path / "big.jsonl", lines)


def _sid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


# -- import ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_import_of_each_format_version_equals_read_jsonl(
    version: int, tmp_path: Path, kafka: KafkaSettings, client: SessionClient
) -> None:
    sid = _sid(f"v{version}")
    if version == 0:
        path = FORMATS / "v0_legacy.jsonl"
    elif version == 1:
        path = FORMATS / "v1_attempts.jsonl"
    elif version == 2:
        path = _write_lines(tmp_path / "v2.jsonl", _v2_lines("v2-prompt"))
    else:
        path = _v3_file(tmp_path / "v3.jsonl", "v3-native")
    header, expected = read_jsonl(path)
    assert header.source_version == version

    result = import_file(path, kafka=kafka, session_id=sid)

    assert (result.session_id, result.source_version) == (sid, version)
    assert (result.published, result.final_seq) == (len(expected), len(expected) - 1)
    got = client.read(sid).events()
    assert without_time(got) == without_time(expected)
    # Times are the writer's: monotone, not the file's.
    assert all(a.time <= b.time for a, b in itertools.pairwise(got))


def test_import_is_idempotent_resumes_a_prefix_and_refuses_a_different_session(
    tmp_path: Path, kafka: KafkaSettings, client: SessionClient
) -> None:
    path = _v3_file(tmp_path / "s.jsonl", "s")
    _, expected = read_jsonl(path)
    sid = _sid("resume")
    # An interrupted import: the first 7 events are already there.
    client.append_many(
        sid,
        [
            draft(
                w["type"],
                w["data"],
                surface_op=w.get("surfaceOp"),
                source_event_seqs=w.get("sourceEventSeqs"),
            )
            for w in (e.to_json() for e in expected[:7])
        ],
    )
    first = import_file(path, kafka=kafka, session_id=sid)
    assert (first.already_present, first.published) == (7, len(expected) - 7)
    again = import_file(path, kafka=kafka, session_id=sid)
    assert (again.already_present, again.published) == (len(expected), 0)
    assert without_time(client.read(sid).events()) == without_time(expected)

    other = FORMATS / "v1_attempts.jsonl"
    with pytest.raises(SessionExistsError) as info:
        import_file(other, kafka=kafka, session_id=sid)
    assert info.value.code == "SESSION_EXISTS" and "--session-id" in info.value.message
    assert len(client.read(sid)) == len(expected)


def test_cli_import_prints_the_session_and_a_writer_rejection_names_class_code_and_seq(
    tmp_path: Path,
    cli_env: KafkaSettings,
    client: SessionClient,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sid = _sid("cli")
    assert main(["import", str(FORMATS / "v1_attempts.jsonl"), "--session-id", sid, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sessionId"] == sid and out["sourceVersion"] == 1
    assert out["published"] == 24 and out["finalSeq"] == 23

    assert main(["import", str(FORMATS / "v0_legacy.jsonl"), "--session-id", _sid("h")]) == 0
    assert "16 events published, final seq 15" in capsys.readouterr().out

    path = _too_big_for_the_writer(tmp_path)
    big = _sid("big")
    # Checked against the writer's limit first: refused whole, before anything is published.
    with pytest.raises(PayloadTooLargeError) as local:
        import_file(path, kafka=cli_env, session_id=big, max_event_bytes=MAX_EVENT_BYTES)
    assert local.value.code == "EVENT_TOO_LARGE" and "seq 1 (user/message)" in local.value.message
    assert len(client.read(big)) == 0
    # The same through the CLI, which takes the limit from the writer's setting.
    monkeypatch.setenv("DSH_WRITER_MAX_EVENT_BYTES", str(MAX_EVENT_BYTES))
    assert main(["import", str(path), "--session-id", big]) == 1
    assert "[EVENT_TOO_LARGE]" in capsys.readouterr().err and len(client.read(big)) == 0
    monkeypatch.delenv("DSH_WRITER_MAX_EVENT_BYTES")
    # A writer with a lower limit than the importer knows still refuses, at that event.
    with pytest.raises(ImportRejectedError) as info:
        import_file(path, kafka=cli_env, session_id=big)
    err = info.value
    assert (err.code, err.error_class, err.error_code) == (
        "IMPORT_REJECTED",
        "PayloadTooLargeError",
        "EVENT_TOO_LARGE",
    )
    # The batch was refused whole; the import then pinpoints the event, committing the ones
    # before it, so a re-run of the fixed file resumes right there.
    assert (err.first_seq, err.last_seq) == (1, 1) and "seq 1 (user/message)" in err.message
    assert without_time(client.read(big).events()) == without_time(read_jsonl(path)[1][:1])
    assert main(["import", str(path), "--session-id", big]) == 1
    assert "[IMPORT_REJECTED]" in capsys.readouterr().err


def test_import_error_paths_name_the_fix(
    tmp_path: Path, servers: Servers, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    good = str(FORMATS / "v0_legacy.jsonl")

    assert main(["import", str(tmp_path / "missing.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "[FILE_NOT_FOUND]" in err and "missing.jsonl" in err

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"session","version":3,"id":"b","createdAt":1}\n{not json\n')
    assert main(["import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "line 2" in err

    invalid = _write_lines(
        tmp_path / "invalid.jsonl",
        [
            {"type": "session", "version": 3, "id": "i", "createdAt": 1},
            {"type": "step/start", "seq": 0, "time": 1, "data": {"turn": 1, "step": 1}},
        ],
    )
    assert main(["import", str(invalid)]) == 1  # checked locally: no broker needed
    err = capsys.readouterr().err
    assert "[NO_OPEN_TURN]" in err and "seq 0" in err

    (port,) = free_ports(1)
    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    assert main(["import", good, "--timeout", "1"]) == 1
    err = capsys.readouterr().err
    assert "[KAFKA_UNREACHABLE]" in err and "dsh up" in err

    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", servers.bootstrap_servers)
    monkeypatch.setenv("DSH_KAFKA_TOPIC_PREFIX", f"absent-{uuid.uuid4().hex[:8]}")
    assert main(["import", good, "--timeout", "10"]) == 1
    err = capsys.readouterr().err
    assert "[TOPIC_MISSING]" in err and "dsh up" in err


def test_import_without_a_writer_says_to_start_one(topics: KafkaSettings) -> None:
    # Fresh topics no writer serves: every batch times out, the log shows no progress.
    started = time.monotonic()
    with pytest.raises(SessionImportError) as info:
        import_file(FORMATS / "v0_legacy.jsonl", kafka=topics, session_id="w", timeout=1)
    took = time.monotonic() - started
    assert info.value.code == "WRITER_TIMEOUT" and "dsh writer" in info.value.message
    # The time it really waited, and where a re-run really starts: nothing was committed.
    reported = float(info.value.message.split(" in ", 1)[1].split("s ", 1)[0])
    assert 3 <= reported <= took
    assert "resumes at seq 0 (nothing was committed)" in info.value.message
    assert "seq -1" not in info.value.message

    # Whoever knows how the writer runs (the CLI, for the local stack) says how to start it.
    with pytest.raises(SessionImportError) as hinted:
        import_file(
            FORMATS / "v0_legacy.jsonl",
            kafka=topics,
            session_id="w",
            timeout=1,
            writer_hint="`dsh up` starts it again",
        )
    assert "`dsh up` starts it again" in hinted.value.message
    assert "dsh writer" not in hinted.value.message


def test_a_session_file_round_trips_through_import_and_export_jsonl(
    tmp_path: Path,
    cli_env: KafkaSettings,
    client: SessionClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DSH file -> `dsh import` -> `dsh export --format jsonl` -> a file DSH reads with the
    same events (times are the writer's), surface and messages."""
    sid = _sid("jsonl")
    source = _v3_file(tmp_path / "in.jsonl", "jsonl-source")
    _, expected = read_jsonl(source)
    assert main(["import", str(source), "--session-id", sid, "--no-progress"]) == 0
    out = tmp_path / "out.jsonl"
    assert main(["export", "--format", "jsonl", sid, "--output", str(out), "--no-progress"]) == 0
    assert f"({len(expected)} events)" in capsys.readouterr().out
    header, exported = read_jsonl(out)
    assert header.id == sid and header.created_at == exported[0].time
    assert without_time(exported) == without_time(expected)
    again, original = (
        dsh.Session.from_restore(sid, exported),
        dsh.Session.from_restore(sid, expected),
    )
    assert again.surface.nodes == original.surface.nodes
    assert again.derive_messages() == original.derive_messages()

    assert main(["export", "--format", "jsonl", _sid("nobody"), "--output", str(out)]) == 1
    assert "[SESSION_UNKNOWN]" in capsys.readouterr().err


APPEND = {"surfaceOp": "append"}


def _bare_file(path: Path, session_id: str) -> Path:
    """A session file as a DSH session created without invariants may write it: an assistant
    message outside any turn, which only the turn invariants refuse."""
    message = assistant(mid="a0")
    lines = [
        f'{{"type":"session","version":3,"id":"{session_id}","createdAt":1}}',
        json.dumps(
            {"type": "user/message", "seq": 0, "time": 1, "data": user("u0"), "surfaceOp": "append"}
        ),
        json.dumps(
            {
                "type": "assistant/message",
                "seq": 1,
                "time": 2,
                "data": message,
                "surfaceOp": "append",
            }
        ),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_import_keeps_a_files_invariants_mode_and_says_how_to_import_a_bare_dsh_file(
    tmp_path: Path,
    cli_env: KafkaSettings,
    client: SessionClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = _bare_file(tmp_path / "bare.jsonl", "bare")
    sid = _sid("bare")
    # DSH does not record the mode; ours defaults to on, and the refusal says what to do.
    assert main(["import", str(source), "--session-id", sid, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "[NO_OPEN_TURN]" in err and "seq 1" in err and "--invariants off" in err
    assert len(client.read(sid)) == 0  # nothing was published

    assert main(["import", str(source), "--session-id", sid, "--invariants", "off", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["invariants"] is False
    assert client.read(sid).invariants is False
    out = tmp_path / "out.jsonl"
    assert main(["export", "--format", "jsonl", sid, "--output", str(out), "--no-progress"]) == 0
    header, exported = read_jsonl(out)
    assert header.invariants is False  # recorded, so that a re-import keeps it
    again = _sid("bare-again")
    result = import_file(out, kafka=cli_env, session_id=again)
    assert result.invariants is False and client.read(again).invariants is False
    assert without_time(client.read(again).events()) == without_time(exported)
    # A session's mode is fixed: resuming it under the other is refused, nothing is sent.
    valid = _v3_file(tmp_path / "valid.jsonl", "valid")
    fixed = _sid("fixed")
    import_file(valid, kafka=cli_env, session_id=fixed, invariants=False)
    with pytest.raises(InvariantsModeError) as info:
        import_file(valid, kafka=cli_env, session_id=fixed)
    assert "--session-id" in info.value.message and client.read(fixed).invariants is False


VECTOR_SESSIONS = [
    pytest.param(name, recorded, id=f"{scenario['scenario']}-{name}")
    for scenario in SCENARIOS
    for name, recorded in scenario["sessions"].items()
]


@pytest.mark.skipif(not VECTORS.exists(), reason=f"no DSH reference vectors at {VECTORS}")
@pytest.mark.parametrize(("name", "recorded"), VECTOR_SESSIONS)
def test_dshs_own_files_round_trip_through_import_and_export(
    name: str,
    recorded: dict[str, Any],
    tmp_path: Path,
    cli_env: KafkaSettings,
    client: SessionClient,
) -> None:
    """Each final session of the reference vectors, as DSH writes it (its header, lineage keys
    and all, then its events): `dsh import` in DSH's mode for it, `dsh export --format jsonl`,
    and the file read back has DSH's events (but for times), surface and messages."""
    source = tmp_path / "dsh.jsonl"
    lines = [{"type": "session", **recorded["header"]}, *recorded["events"]]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    sid = _sid(name)
    mode = "on" if invariants_of(name) else "off"  # DSH's sessions are bare unless asked
    assert main(["import", str(source), "--session-id", sid, "--invariants", mode, "--json"]) == 0
    out = tmp_path / "out.jsonl"
    assert main(["export", "--format", "jsonl", sid, "--output", str(out), "--no-progress"]) == 0
    header, exported = read_jsonl(out)
    assert header.invariants is (None if invariants_of(name) else False)
    events = [{k: v for k, v in e.to_json().items() if k != "time"} for e in exported]
    assert events == [{k: v for k, v in e.items() if k != "time"} for e in recorded["events"]]
    session = restore(
        dsh.Session(sid, invariants=invariants_of(name)), exported, None, mark_end=False
    )
    assert list(session.surface.nodes) == recorded["surface"]["nodes"]
    assert session.surface.replace_generation == recorded["surface"]["replaceGeneration"]
    assert session.derive_messages() == recorded["deriveMessages"]


# -- export ---------------------------------------------------------------------------------


def _topic_records(kafka: KafkaSettings) -> list[tuple[str, int]]:
    """(session id, seq) of every committed record of the events topic."""
    out = []
    for item in scan_partitions(kafka, kafka.topic("events"), range(TEST_PARTITIONS)):
        assert isinstance(item, Record), item
        out.append((item.session_id, item.seq))
    return out


def _exported(directory: Path) -> list[tuple[str, int]]:
    return [(r.session_id, r.event["seq"]) for r in read_export(directory)]


def test_export_round_trip_reimports_equal(
    tmp_path: Path, kafka: KafkaSettings, client: SessionClient
) -> None:
    sids = {
        _sid("rt-v1"): FORMATS / "v1_attempts.jsonl",
        _sid("rt-v2"): _write_lines(tmp_path / "v2.jsonl", _v2_lines("x")),
    }
    for sid, path in sids.items():
        import_file(path, kafka=kafka, session_id=sid)
    out = tmp_path / "export"
    result = export(out, kafka=kafka)
    assert result.records == len(_topic_records(kafka))

    # What an analytics engine sees: container files with the schema embedded, by date.
    files = sorted(out.glob("date=*/part-*.avro"))
    assert [str(f.relative_to(out)) for f in files] == result.files
    with open(files[0], "rb") as fh:
        reader = fastavro.reader(fh)
        schema: Any = reader.writer_schema
        assert reader.codec == "deflate"
        assert schema["name"] == "dsh.v1.SessionEvent"

    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in read_export(out):
        sessions[record.session_id].append(record.event)
    for sid in sids:
        exported = sorted(sessions[sid], key=lambda e: e["seq"])
        # Exactly the committed events, times included.
        assert exported == [e.to_json() for e in client.read(sid).events()]
        path = tmp_path / f"{sid}.jsonl"
        write_jsonl(path, sid, exported)
        again = _sid("reimported")
        import_file(path, kafka=kafka, session_id=again)
        assert without_time(client.read(again).events()) == without_time(
            dsh.Event.from_json(e) for e in exported
        )


def test_export_is_incremental_and_never_duplicates(
    tmp_path: Path, cli_env: KafkaSettings, capsys: Any
) -> None:
    kafka = cli_env
    import_file(FORMATS / "v0_legacy.jsonl", kafka=kafka, session_id=_sid("inc"))
    out = tmp_path / "export"
    assert main(["export", str(out), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["records"] > 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["pending"] == {"renames": [], "deletes": []}
    files_before = sorted(out.glob("date=*/part-*.avro"))

    assert main(["export", str(out), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert (second["records"], second["files"]) == (0, [])
    assert sorted(out.glob("date=*/part-*.avro")) == files_before

    import_file(FORMATS / "v1_attempts.jsonl", kafka=kafka, session_id=_sid("inc-new"))
    assert main(["export", str(out)]) == 0
    assert "exported 24 records" in capsys.readouterr().out
    # The new files start where the checkpoint stood.
    for name in set(out.glob("date=*/part-*.avro")) - set(files_before):
        _, p, lo, _hi = name.stem.split("-")
        assert int(lo) >= manifest["offsets"][p]

    records = _exported(out)
    assert Counter(records).most_common(1)[0][1] == 1  # no duplicates
    assert sorted(records) == sorted(_topic_records(kafka))  # and nothing missing

    # --from-beginning rebuilds the directory: the same records, once.
    assert main(["export", str(out), "--from-beginning", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == len(records)
    assert sorted(_exported(out)) == sorted(records)


def test_export_crash_before_or_after_the_commit_point_never_duplicates(
    tmp_path: Path, kafka: KafkaSettings, client: SessionClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_file(FORMATS / "v0_legacy.jsonl", kafka=kafka, session_id=_sid("crash"))
    out = tmp_path / "export"

    class Crash(Exception):
        pass

    def crash(*_: Any) -> None:
        raise Crash

    # Before the checkpoint is written: the run leaves nothing behind.
    with monkeypatch.context() as m:
        m.setattr(export_mod.Manifest, "save", crash)
        with pytest.raises(Crash):
            export(out, kafka=kafka)
    assert not list(out.glob("date=*/*part-*"))
    assert not (out / MANIFEST).exists()

    # After it, before the renames: the next run rolls them forward and adds nothing.
    with monkeypatch.context() as m:
        m.setattr(export_mod.Manifest, "roll_forward", crash)
        with pytest.raises(Crash):
            export(out, kafka=kafka)
    assert not list(out.glob("date=*/part-*.avro"))  # only temporaries, owed by the manifest
    owed = json.loads((out / MANIFEST).read_text())["pending"]["renames"]
    assert owed

    rerun = export(out, kafka=kafka)
    assert rerun.records == 0
    records = _exported(out)
    assert Counter(records).most_common(1)[0][1] == 1
    assert sorted(records) == sorted(_topic_records(kafka))
    assert len(list(out.glob("date=*/part-*.avro"))) == len(owed)


def test_export_error_paths_name_the_fix(
    tmp_path: Path, servers: Servers, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    if importlib.util.find_spec("cramjam") is None:
        # snappy is optional: without cramjam the export refuses before reading anything.
        assert main(["export", str(tmp_path / "s"), "--codec", "snappy"]) == 1
        assert "[CODEC_UNAVAILABLE]" in capsys.readouterr().err

    (port,) = free_ports(1)
    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    assert main(["export", str(tmp_path / "a"), "--timeout", "1"]) == 1
    err = capsys.readouterr().err
    assert "[KAFKA_UNREACHABLE]" in err and "dsh up" in err

    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", servers.bootstrap_servers)
    monkeypatch.setenv("DSH_KAFKA_TOPIC_PREFIX", f"absent-{uuid.uuid4().hex[:8]}")
    assert main(["export", str(tmp_path / "b"), "--timeout", "10"]) == 1
    err = capsys.readouterr().err
    assert "[TOPIC_MISSING]" in err and "dsh up" in err


def test_export_refuses_a_foreign_or_ahead_checkpoint_and_a_concurrent_run(
    tmp_path: Path, kafka: KafkaSettings, client: SessionClient
) -> None:
    import fcntl

    import_file(FORMATS / "v0_legacy.jsonl", kafka=kafka, session_id=_sid("guard"))
    out = tmp_path / "export"
    export(out, kafka=kafka)
    manifest = json.loads((out / MANIFEST).read_text())

    foreign = {**manifest, "topic": "another.dsh.session.events"}
    (out / MANIFEST).write_text(json.dumps(foreign))
    with pytest.raises(ExportManifestError) as info:
        export(out, kafka=kafka)
    assert info.value.code == "MANIFEST_TOPIC"

    # A checkpoint past the topic's end: the topic was recreated, or this is another cluster.
    ahead = {**manifest, "offsets": {p: o + 1_000_000 for p, o in manifest["offsets"].items()}}
    (out / MANIFEST).write_text(json.dumps(ahead))
    with pytest.raises(ExportManifestError) as info:
        export(out, kafka=kafka)
    assert info.value.code == "MANIFEST_AHEAD" and "--from-beginning" in info.value.message

    with open(out / "_lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(ExportBusyError):
            export(out, kafka=kafka)


def test_export_skips_aborted_transactions_and_ends_past_their_markers(
    tmp_path: Path, kafka: KafkaSettings, client: SessionClient
) -> None:
    from confluent_kafka import Producer

    from schemas import encode_event

    out = tmp_path / "export"
    export(out, kafka=kafka)
    producer = Producer(
        {**kafka.client_config(), "transactional.id": f"test-abort-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(10)
    topic = kafka.topic("events")
    start = dsh.Event.from_json({"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}})
    for commit in (False, True, False):
        producer.begin_transaction()
        for p in range(TEST_PARTITIONS):
            sid = f"txn-{commit}-{p}"
            producer.produce(topic, encode_event(start, sid), key=sid.encode(), partition=p)
        if commit:
            producer.commit_transaction(10)
        else:
            # Delivered first, so the aborted records really lie in the log for the export to
            # skip; an abort racing its first produce may also fail fatally with
            # INVALID_TXN_STATE (librdkafka #4849: EndTxn overtakes AddPartitionsToTxn).
            assert producer.flush(10) == 0
            producer.abort_transaction(10)
    # The last transaction on every partition was aborted: only markers lie at the end.
    result = export(out, kafka=kafka, timeout=15)
    assert result.records == TEST_PARTITIONS
    assert {sid for sid, _ in _exported(out) if sid.startswith("txn-")} == {
        f"txn-True-{p}" for p in range(TEST_PARTITIONS)
    }
    assert export(out, kafka=kafka, timeout=15).records == 0


def test_an_import_through_a_writer_with_a_lower_command_limit_still_commits_every_event(
    tmp_path: Path, topics: KafkaSettings
) -> None:
    """A writer whose DSH_WRITER_MAX_COMMAND_BYTES is under the importer's batches refuses each
    batch whole, though every event fits alone: the import commits them one by one and goes on
    with fresh request ids (the writer answers a rejected id with its rejection for good)."""
    path = _v3_file(tmp_path / "s.jsonl", "s")
    _, expected = read_jsonl(path)
    sid = _sid("small-commands")
    with (
        running_writer(topics, writer_settings(max_command_bytes=600)),
        SessionClient(settings=topics, timeout=20) as c,
    ):
        result = import_file(path, kafka=topics, session_id=sid)
        assert (result.already_present, result.published) == (0, len(expected))
        assert without_time(c.read(sid).events()) == without_time(expected)


def test_a_re_run_after_the_writer_was_fixed_is_a_new_attempt_not_the_old_rejection(
    tmp_path: Path, topics: KafkaSettings
) -> None:
    """The writer remembers a rejection by request id, across restarts too: were a re-run's
    ids the first run's, it would get the old rejection back without being validated."""
    path = _too_big_for_the_writer(tmp_path)
    sid = _sid("rerun")
    strict = writer_settings(max_event_bytes=MAX_EVENT_BYTES)
    with running_writer(topics, strict):
        with pytest.raises(ImportRejectedError) as refused:
            import_file(path, kafka=topics, session_id=sid)
        assert refused.value.error_code == "EVENT_TOO_LARGE" and refused.value.first_seq == 1
    # The operator raises the limit; the writer restarts, its remembered rejections with it.
    with running_writer(topics, writer_settings(group_id=strict.group_id)):
        again = import_file(path, kafka=topics, session_id=sid)
        assert (again.already_present, again.published) == (1, 1)
        with SessionClient(settings=topics, timeout=20) as c:
            assert without_time(c.read(sid).events()) == without_time(read_jsonl(path)[1])


def test_an_export_that_cannot_write_its_files_is_a_typed_error_and_commits_nothing(
    tmp_path: Path, cli_env: KafkaSettings, client: SessionClient, capsys: Any
) -> None:
    """A disk that fills up, a path that is not a directory: an OSError out of the middle of
    an export was a traceback (after the whole session was read, for --format jsonl)."""
    import datetime as dt

    sid = _sid("unwritable")
    import_file(FORMATS / "v0_legacy.jsonl", kafka=cli_env, session_id=sid)

    missing = tmp_path / "no" / "such" / "dir" / "s.jsonl"
    assert main(["export", "--format", "jsonl", sid, "--output", str(missing)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dsh: error [EXPORT_OUTPUT_INVALID]: ") and str(missing) in err, err

    # The day's directory cannot be made: a file has its name (as a full disk fails a write).
    out = tmp_path / "export"
    out.mkdir()
    # The days around now too: a run across midnight (UTC) exports into the next day's.
    now = dt.datetime.now(dt.UTC).date()
    days = [(now + dt.timedelta(days=d)).isoformat() for d in (-1, 0, 1)]
    for day in days:
        (out / f"date={day}").write_text("in the way")
    assert main(["export", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dsh: error [EXPORT_WRITE_FAILED]: "), err
    assert any(f"date={day}" in err for day in days), err
    assert not (out / MANIFEST).exists()
    assert not list(out.glob("date=*/.part-*"))
