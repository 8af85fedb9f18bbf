"""What the benchmarks that run against a stack share of their set-up: the ``--bootstrap``
argument, topics of their own, the services they start as processes (as in production) and
the transactional producers they publish with.

Every run makes topics under a fresh prefix and gives its services fresh group ids and key
prefixes, so runs never see each other's records, nor anything else on the stack.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from deploy.local.processes import free_ports
from servicekit.partitioning import PRODUCER_PARTITIONER
from servicekit.settings import KafkaSettings, configure_codec
from servicekit.topics import ensure_topics

REPO = Path(__file__).resolve().parents[1]
# The settings the benchmark gives its services itself; the user's own (the codec's readers,
# logging) reach them, as "DSH_CODEC_NATIVE=off python -m bench..." promises.
OWN_SETTINGS = ("DSH_KAFKA_", "DSH_WRITER_", "DSH_PROJECTOR_", "DSH_REDIS_", "DSH_SERVE_")


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every Kafka benchmark takes: ``--bootstrap``."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap", default=os.environ.get("DSH_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    )
    return parser


def run_id() -> str:
    return uuid.uuid4().hex[:8]


def fresh_topics(bootstrap: str, partitions: int, name: str = "bench") -> KafkaSettings:
    """Topics of this run's own, under ``{name}-<random>.dsh.session``."""
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap, topic_prefix=f"{name}-{run_id()}.dsh.session"
    )
    ensure_topics(kafka, partitions)
    return kafka


def begin(bootstrap: str, partitions: int) -> KafkaSettings:
    """What a run starts with: the codec's readers as the settings say (DSH_CODEC_NATIVE=off:
    the Python ones, here and in the services started), and topics of its own."""
    configure_codec()
    return fresh_topics(bootstrap, partitions)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (steadier than wall time on a busy box)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(
    command: Sequence[str], kafka: KafkaSettings, settings: dict[str, str], log: Path | None
) -> subprocess.Popen[bytes]:
    """``python -m cli COMMAND`` on ``kafka``'s topics with ``settings`` as its environment's
    DSH_ settings; its output to ``log`` (none: dropped)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OWN_SETTINGS)}
    env.update(
        DSH_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
        DSH_KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        **settings,
    )
    output = open(log, "wb") if log else nullcontext(subprocess.DEVNULL)  # noqa: SIM115
    with output as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", *command],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def start_writer(
    kafka: KafkaSettings,
    group: str,
    *,
    metrics_port: int | None = None,
    extra: Sequence[str] = (),
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """`dsh writer` in group ``group``, its /metrics on ``metrics_port`` (default: a free
    port); ``extra``: DSH_WRITER_X=value items, as ``--writer-env`` takes them."""
    settings = {
        "DSH_WRITER_GROUP_ID": group,
        "DSH_WRITER_METRICS_PORT": str(metrics_port or free_ports(1)[0]),
        "DSH_WRITER_SESSION_TIMEOUT_MS": "6000",
    }
    for item in extra:
        key, _, value = item.partition("=")
        settings[key] = value
    return _start(["writer"], kafka, settings, log)


def start_projector(
    kafka: KafkaSettings, redis_url: str, prefix: str, projection: str = "surface"
) -> subprocess.Popen[bytes]:
    """`dsh project PROJECTION`, its group and Redis keys under ``prefix``."""
    settings = {
        "DSH_REDIS_URL": redis_url,
        "DSH_PROJECTOR_GROUP_PREFIX": prefix,
        "DSH_PROJECTOR_KEY_PREFIX": prefix,
        "DSH_PROJECTOR_POLL_TIMEOUT_S": "0.05",
    }
    return _start(["project", projection], kafka, settings, None)


def start_serve(
    kafka: KafkaSettings,
    redis_url: str,
    prefix: str,
    port: int,
    settings: dict[str, str],
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """`dsh serve` on 127.0.0.1:``port``, reading the read models under ``prefix``;
    ``settings``: more DSH_SERVE_* values; its output to ``log`` (none: dropped)."""
    own = {"DSH_REDIS_URL": redis_url, "DSH_PROJECTOR_KEY_PREFIX": prefix, **settings}
    return _start(["serve", "--port", str(port)], kafka, own, log)


def stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        process.terminate()
        process.wait(30)


def transactional_producer(kafka: KafkaSettings, name: str, config: dict[str, Any]) -> Producer:
    """A bare producer with its transactions initialised, partitioning as our clients do;
    ``name``: its transactional.id, ``config``: more librdkafka settings."""
    producer = Producer(
        {**kafka.client_config(), **PRODUCER_PARTITIONER, "transactional.id": name, **config}
    )
    producer.init_transactions(30)
    return producer
