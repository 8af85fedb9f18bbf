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
from projectors.export import MANIFEST, ExportManifestError, export, read_export
from projectors.export.budget import split
from schemas import HEADER_INHERITED, decode_event
from servicekit import kafka_clients
from servicekit.partition_reader import NOW, read_partitions
from servicekit.settings import KafkaSettings
from tests.conftest import TEST_PARTITIONS, Servers
from tests.integration.writer_support import running_writer, writer_settings
from tests.support.builders import user
from tests.support.prefetch import PrefetchWatch
from tests.support.topics import committed_events, fresh_topics

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


# -- memory: many partitions --------------------------------------------------------------

WIDE_PARTITIONS = 48
WIDE_RECORDS = 12  # per partition: 12 x 16 KB stays under an Avro block and a row group
WIDE_DATA = 16 * 1024


@pytest.fixture(scope="module")
def wide(servers: Servers) -> KafkaSettings:
    """A topic of many partitions, each with a few records of 16 KB of data."""
    kafka = fresh_topics(servers.bootstrap_servers, WIDE_PARTITIONS, "test-wide")
    committed_events(kafka, WIDE_PARTITIONS, WIDE_RECORDS, WIDE_DATA)
    return kafka


class _HeldBytes:
    """What the sinks of one export hold in memory, all open files together, after each record
    (as they count it: `Sink.buffered`); the most it ever was is ``peak``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open: list[Any] = []
        self.peak = 0
        make_sink = export_mod.ExportFormat.sink
        held = self

        class Counted:
            def __init__(self, sink: Any) -> None:
                self.sink = sink

            def add(self, item: Any) -> None:
                self.sink.add(item)
                held.peak = max(held.peak, sum(s.buffered() for s in held.open))

            def finish(self) -> None:
                self.sink.finish()
                held.open.remove(self.sink)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.sink, name)

        def counted(fmt: Any, fh: Any, codec: str) -> Counted:
            sink = make_sink(fmt, fh, codec)
            held.open.append(sink)
            return Counted(sink)

        monkeypatch.setattr(export_mod.ExportFormat, "sink", counted)


def _groups(directory: Path, fmt: str) -> int:
    """Row groups (Parquet) or blocks (Avro) of every file of the export."""
    import fastavro
    import pyarrow.parquet as pq

    count = 0
    for path in directory.glob("date=*/part-*"):
        if fmt == "parquet":
            count += pq.ParquetFile(path).num_row_groups
        else:
            with open(path, "rb") as fh:
                count += sum(1 for _ in fastavro.block_reader(fh))
    return count


@pytest.mark.parametrize("fmt", ("parquet", "avro-flat", "avro"))
def test_the_rows_held_in_memory_stay_within_the_budget_whatever_the_partitions(
    fmt: str, tmp_path: Path, wide: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each partition's file alone holds well under a row group or a block; together the 48
    # held 9 MB. The budget is the setting (1 MiB, its least), not an argument: a run that
    # ignores it still runs, and holds everything. The rows get their share of it (half, here).
    budget = 1024 * 1024
    monkeypatch.setenv("DSH_EXPORT_BUFFER_BYTES", str(budget))
    rows = split(budget, 1).rows  # one broker
    held = _HeldBytes(monkeypatch)
    out = tmp_path / "export"
    result = export(out, kafka=wide, format=fmt)

    records = WIDE_PARTITIONS * WIDE_RECORDS
    assert result.records == records
    assert held.peak <= rows + 2 * WIDE_DATA  # one record over it, then the largest is written
    assert result.buffered_peak == held.peak
    # Every record exactly once, in the file of its partition.
    keys = (
        [(r.session_id, r.event["seq"]) for r in read_export(out)]
        if fmt == "avro"
        else _rows(out, fmt)
    )
    assert sorted(keys) == sorted(
        (f"events-{p}", seq) for p in range(WIDE_PARTITIONS) for seq in range(WIDE_RECORDS)
    )
    assert len(result.files) == WIDE_PARTITIONS

    # With the default budget the same topic is a row group or block per file, as before.
    monkeypatch.delenv("DSH_EXPORT_BUFFER_BYTES")
    roomy = export(tmp_path / "roomy", kafka=wide, format=fmt)
    assert roomy.records == records and _groups(tmp_path / "roomy", fmt) == WIDE_PARTITIONS


def test_the_consumer_prefetches_within_its_share_of_the_budget(
    tmp_path: Path, wide: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What librdkafka itself counts as prefetched (its statistics' ``fetchq_size``: the bytes
    of records in the consumer's queue, which all partitions share) while the export is held on
    its first record, so the consumer fetches all it is allowed to: with librdkafka's defaults
    that is the whole topic (9 MB here; up to 64 MiB and a 50 MiB fetch in general) whatever
    ``DSH_EXPORT_BUFFER_BYTES`` says. Sized from the setting, the queue stops at its share and
    overshoots it by one fetch at most; that it gets there shows the hold was long enough (a
    broker slow to answer gets the next batch held too)."""
    budget = 8 * 1024 * 1024  # a small pod's
    monkeypatch.setenv("DSH_EXPORT_BUFFER_BYTES", str(budget))
    shares = split(budget, 1)  # one broker leads every partition
    watch = PrefetchWatch(shares.queue)
    watch.install(monkeypatch)
    result = export(tmp_path / "export", kafka=wide, format="avro")

    assert result.records == WIDE_PARTITIONS * WIDE_RECORDS
    assert watch.queued, "librdkafka reported no statistics"
    assert shares.queue <= max(watch.queued) <= shares.queue + shares.fetch
