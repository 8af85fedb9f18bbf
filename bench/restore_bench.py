"""Restore benchmark: how long a writer takes to restore one partition's sessions from the
log, and how long ``SessionClient.read_log`` takes, each next to a raw confluent-kafka consumer
reading the same records in the same run.

A writer restores every partition it is given (start-up, a rebalance, a writer or broker
failure), one after another, before it serves them; the fixed cost per partition multiplies
with the partitions it owns. Both restore figures are with fresh reader clients, as after a
failed attempt (``_renew_readers``), and with the clients already warm, as for the second
and later partitions of one assignment.

Run against a broker you started (`dsh up`):
    .venv/bin/python -m bench.restore_bench --bootstrap 127.0.0.1:19092
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bench.figures import percentile, timed
from bench.stack import bench_parser, fresh_topics, run_id, start_writer, stop
from bench.workload import message, sessions_in
from producers import SessionClient, draft
from producers.writer.restore import restore_partition
from servicekit import kafka_clients
from servicekit.settings import KafkaSettings

PARTITION = 0


def fill(kafka: KafkaSettings, sessions: list[str], events: int) -> None:
    """``events`` per session through a writer, 10 per command."""
    log = Path(f"/tmp/restore-bench-{run_id()[:6]}.log")
    writer = start_writer(kafka, f"restore-bench-{run_id()}", log=log)
    try:
        with SessionClient(settings=kafka, timeout=60) as client:
            futures = []
            for start in range(0, events, 10):
                for sid in sessions:
                    drafts = [
                        draft("user/message", message(start + k), surface_op="append")
                        for k in range(min(10, events - start))
                    ]
                    futures.append(client.append_many_async(sid, drafts))
            for f in futures:
                f.result()
    finally:
        stop(writer)
        log.unlink(missing_ok=True)


def raw_consumer(kafka: KafkaSettings) -> Consumer:
    """A bare read_committed consumer that says where a partition ends."""
    return Consumer(
        {
            **kafka.client_config(),
            "group.id": "raw-unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )


def raw_read(kafka: KafkaSettings, topic: str, fresh: Consumer | None) -> int:
    """Every record of the partition through a bare read_committed consumer, to its end."""
    consumer = fresh or raw_consumer(kafka)
    consumer.list_topics(topic, timeout=10)
    consumer.assign([TopicPartition(topic, PARTITION, 0)])
    n = 0
    while True:
        m = consumer.poll(1.0)
        if m is None:
            continue
        err = m.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF:
            break
        n += 1
        n += sum(1 for x in consumer.consume(500, 0) if x.error() is None)
    consumer.unassign()
    if fresh is None:
        consumer.close()
    return n


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": statistics.median(samples) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
    }


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=20, help="sessions in the partition")
    parser.add_argument("--events", type=int, default=100, help="events per session")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    kafka = fresh_topics(args.bootstrap, args.partitions)
    sessions = sessions_in(PARTITION, args.partitions, args.sessions, "restore")
    fill(kafka, sessions, args.events)
    events, snapshots = kafka.topic("events"), kafka.topic("snapshots")
    topics = (events, snapshots)

    def restore(reader: Consumer, probe: Consumer) -> None:
        state = restore_partition(reader, probe, topics, PARTITION, 60)
        assert len(state.sessions) == len(sessions), len(state.sessions)

    def restore_fresh() -> None:
        reader = kafka_clients.reader(kafka, topics=topics)
        probe = kafka_clients.reader(kafka, "read_uncommitted", topics=topics)
        try:
            restore(reader, probe)
        finally:
            reader.close()
            probe.close()

    warm_reader = kafka_clients.reader(kafka, topics=topics)
    warm_probe = kafka_clients.reader(kafka, "read_uncommitted", topics=topics)
    warm_raw = raw_consumer(kafka)
    results: dict[str, Any] = {
        "records": raw_read(kafka, events, warm_raw),
        "sessions": args.sessions,
        "events_per_session": args.events,
        "trials": args.trials,
    }
    try:
        rows = {
            "restore, fresh clients": timed(restore_fresh, args.trials),
            "restore, warm clients": timed(lambda: restore(warm_reader, warm_probe), args.trials),
            "raw read, fresh consumer": timed(lambda: raw_read(kafka, events, None), args.trials),
            "raw read, warm consumer": timed(
                lambda: raw_read(kafka, events, warm_raw), args.trials
            ),
        }
        with SessionClient(settings=kafka, timeout=60) as client:
            # No writer runs here: the read of the log itself (bench/read_bench.py measures
            # SessionClient.read, which the writer answers).
            rows["SessionClient.read_log (one session)"] = timed(
                lambda: client.read_log(sessions[0]), args.trials
            )
    finally:
        for c in (warm_reader, warm_probe, warm_raw):
            c.close()
    results.update({name: summary(samples) for name, samples in rows.items()})
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"partition {PARTITION}: {args.sessions} sessions x {args.events} events "
        f"({results['records']} records), {args.trials} trials each"
    )
    for name in rows:
        r = results[name]
        print(f"  {name:36s} p50 {r['p50_ms']:8.1f} ms   p99 {r['p99_ms']:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
