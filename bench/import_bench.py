"""Import benchmark: ``dsh import`` of a 100,000-event session file through a writer, beside a
raw ceiling in the same run.

The file is realistic turns (``bench.workload.session``: prompt, step, assistant message with a
tool call, tool call and result, ends; 8 events a turn). Each run imports it under a new session
id with ``import_file`` (what ``dsh import`` calls): file read and migration, local validation,
size checks, the log read at the start and the pipelined batches, all timed, as the command's
own ``seconds`` counts them. The raw ceiling is a bare transactional producer publishing the
same events' topic values (encoded beforehand, untimed) in transactions of 1,000 records.
Medians of ``--runs`` runs, alternated.

Run against a stack you started (`dsh up --no-services`):
    .venv/bin/python -m bench.import_bench --bootstrap 127.0.0.1:19092 --runs 3
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.stack import begin, bench_parser, run_id, start_writer, stop, transactional_producer
from bench.workload import session
from dsh.formats import write_jsonl
from producers.importer import import_file
from schemas import encode_event
from servicekit.settings import KafkaSettings

EVENTS_PER_TURN = 8
RAW_TRANSACTION = 1000  # records per raw transaction


def raw_publish(kafka: KafkaSettings, values: list[bytes], session_id: str) -> float:
    """Records/s of a bare transactional producer publishing ``values`` under one key."""
    producer = transactional_producer(
        kafka, f"raw-import-{uuid.uuid4().hex}", {"retry.backoff.ms": 10, "linger.ms": 1}
    )
    topic, key = kafka.topic("events"), session_id.encode()
    start = time.perf_counter()
    for i in range(0, len(values), RAW_TRANSACTION):
        producer.begin_transaction()
        for value in values[i : i + RAW_TRANSACTION]:
            while True:
                try:
                    producer.produce(topic, value, key)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(30)
    return len(values) / (time.perf_counter() - start)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    kafka = begin(args.bootstrap, 4)
    turns = max(1, args.events // EVENTS_PER_TURN)
    source = session("import-bench", turns)
    events = source.events()
    values = [encode_event(e.to_json(), "raw-import") for e in events]
    log = Path(f"/tmp/import-bench-{run_id()[:6]}.log")
    writer = start_writer(kafka, f"import-bench-{run_id()}", log=log)
    imports: list[float] = []
    raws: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "session.jsonl"
            write_jsonl(path, source.id, events)
            # The writer's first writes to a partition are slow (transactions, metadata).
            import_file(path, kafka=kafka, session_id=f"warm-{run_id()}", timeout=120)
            for _ in range(args.runs):
                result = import_file(path, kafka=kafka, session_id=f"imp-{run_id()}", timeout=120)
                assert result.published == len(events), result
                imports.append(len(events) / result.seconds)
                raws.append(raw_publish(kafka, values, f"raw-{run_id()}"))
    finally:
        stop(writer)
        log.unlink(missing_ok=True)
    imported, raw = round(statistics.median(imports)), round(statistics.median(raws))
    figures = {
        "events": len(events),
        "import_events_per_s": imported,
        "raw_records_per_s": raw,
        "ratio": round(imported / raw, 2),
        "runs_import": [round(x) for x in imports],
        "runs_raw": [round(x) for x in raws],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"dsh import of a {len(events):,}-event file, medians of {args.runs} runs")
    print(
        f"  import          {figures['import_events_per_s']:>9,} events/s  {figures['runs_import']}"
    )
    print(f"  raw producer    {figures['raw_records_per_s']:>9,} records/s {figures['runs_raw']}")
    print(f"  import ÷ raw    {figures['ratio']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
