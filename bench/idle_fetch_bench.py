"""What idle tailing consumers cost the broker: CPU of the broker process while ``--consumers``
read_committed consumers tail an empty 8-partition topic, for each ``fetch.wait.max.ms``.

Every SessionClient keeps such a consumer on its replies partition, and every writer and
projector one on its input, so on a quiet platform this is most of what the broker does.
And what the wait costs in latency: from ``commit_transaction`` returning to a read_committed
consumer with that wait having the record (records and commit markers end a waiting fetch).

Run against a broker you started (`dsh up`), alone on the machine:
    .venv/bin/python -m bench.idle_fetch_bench --bootstrap 127.0.0.1:19092
The broker's pid is found by its main class unless ``--broker-pid`` is given.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.stack import cpu_seconds


def broker_pid() -> int:
    found = subprocess.run(["pgrep", "-f", "kafka.Kafka"], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    if len(pids) != 1:
        raise SystemExit(f"found {len(pids)} Kafka brokers on this machine: pass --broker-pid")
    return pids[0]


def tail(consumers: list[Consumer], seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if not consumers:
            time.sleep(left)
        for c in consumers:
            c.poll(0.01)


def broker_cpu_share(
    bootstrap: str, topic: str, pid: int, consumers: int, wait_ms: int, seconds: float
) -> float:
    """The broker's CPU (cores) over ``seconds`` while the consumers tail ``topic``."""
    group = f"idle-{uuid.uuid4().hex[:8]}"
    tails = [
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{group}-{i}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "latest",
                "fetch.wait.max.ms": wait_ms,
            }
        )
        for i in range(consumers)
    ]
    for c in tails:
        c.subscribe([topic])
    tail(tails, 5.0)  # joined their groups and fetching
    cpu, start = cpu_seconds(pid), time.monotonic()
    tail(tails, seconds)
    share = (cpu_seconds(pid) - cpu) / (time.monotonic() - start)
    for c in tails:
        c.close()
    return share


def committed_to_consumed_ms(
    bootstrap: str, topic: str, wait_ms: int, records: int = 100
) -> tuple[float, float]:
    """p50 and max of the delay from a one-record transaction's commit returning to a
    read_committed consumer with fetch.wait.max.ms=``wait_ms`` having that record."""
    run = uuid.uuid4().hex[:8]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{run}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": wait_ms,
        }
    )
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(0.1)
    consumer.poll(1.0)  # positioned at the end, a fetch waiting at the broker
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"lat-{run}"})
    producer.init_transactions(30)
    committed: dict[bytes, float] = {}
    delays: list[float] = []

    def consume() -> None:
        while len(delays) < records:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                now = time.monotonic()
                while m.value() not in committed:  # the commit call has not returned yet
                    time.sleep(0.0001)
                    now = time.monotonic()
                delays.append((now - committed[m.value() or b""]) * 1000)

    reader = threading.Thread(target=consume)
    reader.start()
    for i in range(records):
        value = str(i).encode()
        producer.begin_transaction()
        producer.produce(topic, value, partition=i % 8)
        producer.commit_transaction(30)
        committed[value] = time.monotonic()
        time.sleep(0.02)
    reader.join(30)
    consumer.close()
    return statistics.median(delays), max(delays)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--broker-pid", type=int, default=0)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--waits", default="5,20,100,500", help="fetch.wait.max.ms values")
    args = parser.parse_args()
    pid = args.broker_pid or broker_pid()
    topic = f"bench-idle-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, 8, 1)])[topic].result(30)
    try:
        baseline = broker_cpu_share(args.bootstrap, topic, pid, 0, 500, args.seconds)
        print(f"broker CPU with no consumer: {baseline * 100:.1f} % of a core")
        for wait in (int(w) for w in args.waits.split(",")):
            share = broker_cpu_share(args.bootstrap, topic, pid, args.consumers, wait, args.seconds)
            print(
                f"{args.consumers} idle consumers, fetch.wait.max.ms={wait}: broker CPU "
                f"{share * 100:.1f} % of a core ({(share - baseline) * 100:+.1f} over none)"
            )
        for wait in (int(w) for w in args.waits.split(",")):
            p50, worst = committed_to_consumed_ms(args.bootstrap, topic, wait)
            print(
                f"fetch.wait.max.ms={wait}: committed record consumed after p50 {p50:.1f} ms, "
                f"at most {worst:.1f} ms (100 one-record transactions, one every 20 ms)"
            )
    finally:
        admin.delete_topics([topic])[topic].result(30)


if __name__ == "__main__":
    main()
