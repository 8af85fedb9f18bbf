"""Export benchmark: records/s `dsh export` writes in each format (the wire Avro, avro-flat,
Parquet), beside a raw read of the same topic in the same run: a plain confluent-kafka
consumer reading every record to the end, nothing decoded (the ceiling of any export).

A topic of ``--sessions`` realistic sessions of ``--turns`` turns (8 events a turn: 200,000
events by default) is published once; each run then reads it raw and exports it from scratch
in each format into a new directory, the order rotating from run to run, each measurement in a
process of its own (one measured after another in the same process read up to 5x slower: what
the one before left on the heap, not what is measured). Medians of the runs, and each one's
ratio to the raw read's median.

Run against a stack you started (`dsh up --no-services`):
    .venv/bin/python -m bench.export_bench --bootstrap 127.0.0.1:19092 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from bench.projector_throughput import publish
from bench.stack import REPO, begin, bench_parser
from bench.workload import interleaved, session
from projectors.export import FORMATS, export
from servicekit import kafka_clients
from servicekit.partition_reader import read_partitions
from servicekit.settings import KafkaSettings

WARM = 10_000  # records read before the steady rate's clock starts


class Clock:
    """Times a read: from its start, and from its WARM-th record (a consumer's first fetch
    sometimes waits ~1 s on metadata, which a 0.3 s raw read of 200,000 records cannot hide)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.warm_at = self.ended = 0.0
        self.warm_done = 0

    def __call__(self, done: int, _total: int = 0) -> None:
        now = time.perf_counter()
        if not self.warm_at and done >= WARM:
            self.warm_at, self.warm_done = now, done
        self.ended = now

    def figures(self, records: int) -> list[float]:
        return [
            records,
            self.ended - self.started,
            (records - self.warm_done) / (self.ended - self.warm_at),
        ]


def raw_read(kafka: KafkaSettings, partitions: int) -> list[float]:
    """[records, seconds, steady records/s] of a plain consumer reading every partition from
    its first offset to its end as of the start, as the export reads them (the same consumer
    settings and reader), with no decoding and no files."""
    clock = Clock()
    topic = kafka.topic("events")
    consumer = kafka_clients.reader(kafka, topics=(topic,))
    try:
        ranges: dict[int, tuple[int | None, int | None]] = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10.0, False)
            ranges[p] = (low, high)
        records = size = 0
        for m in read_partitions(consumer, topic, ranges, 30):
            records += 1
            size += len(m.value() or b"")
            if records % WARM == 0:
                clock(records)
    finally:
        consumer.close()
    clock(records)
    return clock.figures(records)


def export_rate(kafka: KafkaSettings, fmt: str) -> list[float]:
    """[records, seconds, steady records/s, bytes] of a whole-topic export in ``fmt`` into a
    new directory (the export reports progress every 10,000 records, and at its end)."""
    directory = Path(tempfile.mkdtemp(prefix=f"export-bench-{fmt}-"))
    clock = Clock()
    try:
        result = export(directory / "out", kafka=kafka, format=fmt, progress=clock)
        clock(result.records)
        return [*clock.figures(result.records), result.bytes]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def measure(kafka: KafkaSettings, name: str, partitions: int) -> list[float]:
    """What ``raw_read`` or ``export_rate`` returns, measured in a new process."""
    command = [sys.executable, "-m", "bench.export_bench", "--bootstrap", kafka.bootstrap_servers]
    command += ["--measure", name, "--prefix", kafka.topic_prefix, "--partitions", str(partitions)]
    done = subprocess.run(
        command, cwd=REPO, env=os.environ, capture_output=True, text=True, check=True
    )
    figures: list[float] = json.loads(done.stdout)
    return figures


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # one measurement, in a child
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.measure:
        kafka = KafkaSettings(bootstrap_servers=args.bootstrap, topic_prefix=args.prefix)
        if args.measure == "raw":
            print(json.dumps(raw_read(kafka, args.partitions)))
        else:
            print(json.dumps(export_rate(kafka, args.measure)))
        return 0
    kafka = begin(args.bootstrap, args.partitions)
    records = interleaved([session(f"s{i}", args.turns) for i in range(args.sessions)])
    publish(kafka, records)
    names = ["raw", *FORMATS]
    whole: dict[str, list[float]] = {name: [] for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    sizes: dict[str, int] = {}
    for run in range(args.runs):
        order = names[run % len(names) :] + names[: run % len(names)]
        for name in order:
            count, seconds, steady, *size = measure(kafka, name, args.partitions)
            assert count == len(records), (name, count, len(records))
            whole[name].append(count / seconds)
            rates[name].append(steady)
            if size:
                sizes[name] = int(size[0])
    raw = statistics.median(rates["raw"])
    out: dict[str, Any] = {"records": len(records), "runs": args.runs}
    for name in names:
        median = statistics.median(rates[name])
        out[name] = {
            "records_per_s": round(median),
            "ratio_to_raw": round(median / raw, 3),
            "records_per_s_with_setup": round(statistics.median(whole[name])),
            "runs": [round(r) for r in rates[name]],
            **({"bytes": sizes[name]} if name in sizes else {}),
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
