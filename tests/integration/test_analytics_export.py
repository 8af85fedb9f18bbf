"""`dsh export --format parquet|avro-flat` against the real broker and a writer: the demo's
scripted session (twice) and a fork of it, exported in both flat formats, and the questions
analysts ask first answered by DuckDB and Polars from the files equal the same counts taken
from the topic itself; a fork's inherited rows are marked, so excluding them counts the
parent's history once; a re-run exports only new records, and a crash on either side of the
commit point leaves no duplicate."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

import dsh
from cli import demo_script
from cli.demo import Pipelined
from interpreters import OFFLOAD_SPEC, offload_images
from producers import SessionClient
from projectors import export as export_mod
from projectors.export import MANIFEST, ExportManifestError, export
from schemas import HEADER_INHERITED, decode_event
from servicekit import kafka_clients
from servicekit.partition_reader import NOW, read_partitions
from servicekit.settings import KafkaSettings
from tests.conftest import TEST_PARTITIONS, Servers
from tests.integration.writer_support import running_writer, writer_settings
from tests.support.builders import user
from tests.support.topics import fresh_topics

FLAT = ("parquet", "avro-flat")


@pytest.fixture(scope="module")
def kafka(servers: Servers) -> KafkaSettings:
    settings = fresh_topics(servers.bootstrap_servers, TEST_PARTITIONS, "test-an")
    return settings


@pytest.fixture(scope="module")
def client(kafka: KafkaSettings) -> Iterator[SessionClient]:
    # The demo offloads an image: the writer needs the interpreter, as the local stack's has.
    with (
        running_writer(kafka, writer_settings(projections=OFFLOAD_SPEC)),
        SessionClient(settings=kafka, timeout=30) as c,
    ):
        yield c


@dataclass(frozen=True)
class Demo:
    parents: list[str]
    fork: str
    inherited: int  # events the fork copied from its parent


def _run_demo(client: SessionClient, session_id: str) -> dsh.Session:
    """The demo's script through the writer, pipelined as `dsh demo` appends it."""
    session = dsh.Session.create(session_id)
    session.register_message_projection("image/offload", offload_images)
    append = Pipelined(client, session, 30)
    demo_script.run_script(append)
    append.wait()
    return session


@pytest.fixture(scope="module")
def demo(client: SessionClient) -> Demo:
    run = uuid.uuid4().hex[:6]
    parent = _run_demo(client, f"demo-{run}-a")
    _run_demo(client, f"demo-{run}-b")
    # The fork as `dsh demo` makes it: the core forks, the child's first command publishes
    # what it inherited (the writer marks those records), then a turn of its own.
    fork_id = f"demo-{run}-a-fork"
    child = parent.fork(fork_id)
    drafts = [
        {k: v for k, v in e.to_json().items() if k not in ("seq", "time")} for e in child.events()
    ]
    client.append_many(fork_id, drafts, expected_seq=0, timeout=30)
    fork_append = Pipelined(client, child, 30)
    demo_script.fork_turn(fork_append, len(demo_script.TURNS) + 1)
    fork_append.wait()
    return Demo([parent.id, f"demo-{run}-b"], fork_id, len(parent))


# -- the truth: the topic, read with the codec ----------------------------------------------


@dataclass(frozen=True)
class TopicRow:
    session_id: str
    event: dict[str, Any]
    inherited: bool


def _topic(kafka: KafkaSettings) -> list[TopicRow]:
    topic = kafka.topic("events")
    consumer = kafka_clients.reader(kafka, topics=(topic,))
    try:
        ranges = {p: (None, NOW) for p in range(TEST_PARTITIONS)}
        out = []
        for m in read_partitions(consumer, topic, ranges, 30):
            record = decode_event(m.value() or b"")
            headers = dict(m.headers() or [])
            out.append(
                TopicRow(record.session_id, record.event, headers.get(HEADER_INHERITED) == b"1")
            )
        return out
    finally:
        consumer.close()


def _answers_from_topic(rows: list[TopicRow], own_only: bool) -> dict[str, Any]:
    rows = [r for r in rows if not (own_only and r.inherited)]
    tokens: Counter[tuple[str, str]] = Counter()
    for r in rows:
        data = r.event["data"]
        if r.event["type"] == "assistant/message" and "usage" in data:
            source = data["message"]["source"]
            tokens[(source["model"], "in")] += data["usage"]["inputTokens"]
            tokens[(source["model"], "out")] += data["usage"]["outputTokens"]
    return {
        "per_type": dict(Counter(r.event["type"] for r in rows)),
        "turns": dict(Counter(r.session_id for r in rows if r.event["type"] == "turn/start")),
        "tokens": {m: (tokens[(m, "in")], tokens[(m, "out")]) for m, _ in tokens},
        "failed": dict(
            Counter(
                r.event["data"]["error"]["code"]
                for r in rows
                if r.event["type"] == "assistant/attempt" and "error" in r.event["data"]
            )
        ),
    }


# -- the engines --------------------------------------------------------------------------

QUERIES = {
    "per_type": "SELECT type, count(*) FROM events {where} GROUP BY type",
    "turns": "SELECT session_id, count(*) FROM events "
    "WHERE type = 'turn/start' {and_} GROUP BY session_id",
    "tokens": "SELECT model, sum(usage_input_tokens), sum(usage_output_tokens) FROM events "
    "WHERE usage_input_tokens IS NOT NULL {and_} GROUP BY model",
    "failed": "SELECT error_code, count(*) FROM events "
    "WHERE type = 'assistant/attempt' AND error_code IS NOT NULL {and_} GROUP BY error_code",
}


def _avro_extension() -> Path:
    """DuckDB's avro extension as its PyPI wheel ships it (pinned with DuckDB in the dev extra):
    loaded from the file, so the test needs no extension repository."""
    import duckdb_extension_avro

    path = Path(duckdb_extension_avro.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    return path / "avro.duckdb_extension"


def _duckdb(directory: Path, fmt: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    if fmt == "parquet":
        source = f"read_parquet('{directory}/**/*.parquet', hive_partitioning = true)"
    else:
        con.sql(f"LOAD '{_avro_extension()}'")
        source = f"read_avro('{directory}/**/*.avro')"
    con.sql(f"CREATE VIEW events AS SELECT * FROM {source}")
    return con


def _polars(directory: Path, fmt: str) -> pl.DataFrame:
    if fmt == "parquet":
        return pl.scan_parquet(f"{directory}/**/*.parquet", hive_partitioning=True).collect()
    return pl.concat(pl.read_avro(f) for f in sorted(directory.glob("date=*/part-*.avro")))


def _answers_from_engine(engine: str, directory: Path, fmt: str, own_only: bool) -> dict[str, Any]:
    where = "WHERE NOT inherited" if own_only else ""
    and_ = "AND NOT inherited" if own_only else ""
    if engine == "duckdb":
        con = _duckdb(directory, fmt)
        rows = {k: con.sql(q.format(where=where, and_=and_)).fetchall() for k, q in QUERIES.items()}
    else:
        ctx = pl.SQLContext(events=_polars(directory, fmt))
        rows = {
            k: ctx.execute(q.format(where=where, and_=and_), eager=True).rows()
            for k, q in QUERIES.items()
        }
    return {
        "per_type": dict(rows["per_type"]),
        "turns": dict(rows["turns"]),
        "tokens": {m: (i, o) for m, i, o in rows["tokens"]},
        "failed": dict(rows["failed"]),
    }


@pytest.fixture(scope="module")
def exported(
    kafka: KafkaSettings, demo: Demo, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    out = {}
    for fmt in FLAT:
        directory = tmp_path_factory.mktemp(fmt) / "export"
        assert export(directory, kafka=kafka, format=fmt).records > 0
        out[fmt] = directory
    return out


@pytest.mark.parametrize("fmt", FLAT)
@pytest.mark.parametrize("engine", ["duckdb", "polars"])
def test_duckdb_and_polars_answer_as_the_topic(
    engine: str, fmt: str, kafka: KafkaSettings, demo: Demo, exported: dict[str, Path]
) -> None:
    topic = _topic(kafka)
    for own_only in (False, True):
        got = _answers_from_engine(engine, exported[fmt], fmt, own_only)
        assert got == _answers_from_topic(topic, own_only), (engine, fmt, own_only)
    # What the demo made: 12 turns each, the fork's 12 inherited plus its own.
    everything = _answers_from_engine(engine, exported[fmt], fmt, False)
    assert [everything["turns"][s] for s in demo.parents] == [12, 12]
    assert everything["turns"][demo.fork] == 13
    assert everything["failed"] == {"PROVIDER_OVERLOADED": 3}
    own = _answers_from_engine(engine, exported[fmt], fmt, True)
    assert own["turns"][demo.fork] == 1 and own["failed"] == {"PROVIDER_OVERLOADED": 2}


@pytest.mark.parametrize("fmt", FLAT)
def test_the_forks_inherited_rows_are_marked_and_the_envelope_typed(
    fmt: str, kafka: KafkaSettings, demo: Demo, exported: dict[str, Path]
) -> None:
    rows = _polars(exported[fmt], fmt)
    inherited = rows.filter(pl.col("inherited"))
    assert set(inherited["session_id"]) == {demo.fork}
    assert sorted(inherited["seq"]) == list(range(demo.inherited))
    # The fork's end-seed marker and its own turn are its own.
    fork_own = rows.filter((pl.col("session_id") == demo.fork) & ~pl.col("inherited"))
    assert fork_own["type"][0] == "session/end-seed" and fork_own["seq"][0] == demo.inherited
    # Excluding inherited rows counts the parent's history once: as the parent alone has it.
    parent = rows.filter(pl.col("session_id") == demo.parents[0])
    assert inherited["data"].to_list() == parent.sort("seq")["data"].to_list()

    # One row per committed record, where it lies, the time a UTC timestamp by its date folder.
    topic = _topic(kafka)
    assert rows.height == len(topic)
    assert rows.select(["partition", "offset"]).is_unique().all()
    assert rows["time"].dtype == pl.Datetime("ms", "UTC")
    for path in exported[fmt].glob("date=*/part-*"):
        frame = pl.read_parquet(path) if fmt == "parquet" else pl.read_avro(path)
        day = dt.date.fromisoformat(path.parent.name.removeprefix("date="))
        assert set(frame["time"].dt.date()) == {day}
    manifest = json.loads((exported[fmt] / MANIFEST).read_text())
    assert manifest["exportFormat"] == fmt


def _rows(directory: Path, fmt: str) -> list[tuple[str, int]]:
    frame = _polars(directory, fmt)
    return list(zip(frame["session_id"], frame["seq"], strict=True))


def _topic_keys(kafka: KafkaSettings) -> list[tuple[str, int]]:
    return [(r.session_id, r.event["seq"]) for r in _topic(kafka)]


def _append_some(client: SessionClient, n: int) -> str:
    sid = f"more-{uuid.uuid4().hex[:8]}"
    for i in range(n):
        client.append(sid, "user/message", user(f"m{i}"), surface_op="append")
    return sid


@pytest.mark.parametrize("fmt", FLAT)
def test_a_rerun_exports_only_the_new_records(
    fmt: str, tmp_path: Path, kafka: KafkaSettings, client: SessionClient, demo: Demo
) -> None:
    out = tmp_path / "export"
    first = export(out, kafka=kafka, format=fmt)
    assert first.records == len(_topic_keys(kafka)) and first.format == fmt
    checkpoint = json.loads((out / MANIFEST).read_text())["offsets"]
    assert export(out, kafka=kafka, format=fmt).records == 0

    sid = _append_some(client, 5)
    again = export(out, kafka=kafka, format=fmt)
    assert again.records == 5
    for name in again.files:
        _, p, lo, _hi = Path(name).stem.split("-")
        assert int(lo) >= checkpoint[p]
    rows = _rows(out, fmt)
    assert Counter(rows).most_common(1)[0][1] == 1
    assert sorted(rows) == sorted(_topic_keys(kafka))
    assert sorted(s for s, _ in rows if s == sid) == [sid] * 5


@pytest.mark.parametrize("fmt", FLAT)
def test_a_crash_before_or_after_the_commit_point_never_duplicates(
    fmt: str,
    tmp_path: Path,
    kafka: KafkaSettings,
    client: SessionClient,
    demo: Demo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _append_some(client, 3)
    out = tmp_path / "export"

    class Crash(Exception):
        pass

    def crash(*_: Any) -> None:
        raise Crash

    with monkeypatch.context() as m:
        m.setattr(export_mod.Manifest, "save", crash)
        with pytest.raises(Crash):
            export(out, kafka=kafka, format=fmt)
    assert not list(out.glob("date=*/*part-*"))
    assert not (out / MANIFEST).exists()

    with monkeypatch.context() as m:
        m.setattr(export_mod.Manifest, "roll_forward", crash)
        with pytest.raises(Crash):
            export(out, kafka=kafka, format=fmt)
    assert not list(out.glob("date=*/part-*"))  # only temporaries, owed by the manifest
    owed = json.loads((out / MANIFEST).read_text())["pending"]["renames"]
    assert owed and all(tmp.endswith(".tmp") for tmp, _ in owed)

    assert export(out, kafka=kafka, format=fmt).records == 0
    rows = _rows(out, fmt)
    assert Counter(rows).most_common(1)[0][1] == 1
    assert sorted(rows) == sorted(_topic_keys(kafka))
    assert len(list(out.glob("date=*/part-*"))) == len(owed)


def test_a_directory_holds_one_format(tmp_path: Path, kafka: KafkaSettings, demo: Demo) -> None:
    out = tmp_path / "export"
    export(out, kafka=kafka)  # the wire Avro
    for fmt in FLAT:
        with pytest.raises(ExportManifestError) as info:
            export(out, kafka=kafka, format=fmt)
        assert info.value.code == "MANIFEST_FORMAT" and "another directory" in info.value.message
    # A checkpoint from before formats were recorded exported the wire Avro.
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest.pop("exportFormat") == "avro"
    (out / MANIFEST).write_text(json.dumps(manifest))
    assert export(out, kafka=kafka).records == 0
    with pytest.raises(ExportManifestError) as info:
        export(out, kafka=kafka, format="parquet")
    assert info.value.code == "MANIFEST_FORMAT"
