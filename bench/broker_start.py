"""What a local Kafka node costs to make and keep, for each set of JVM options: the CPU of its
storage format, of its start until the cluster answers, and per minute while it idles; with and
without the class archive (``deploy.local.kafka.class_archive``). The test suite starts dozens
of nodes, so this is most of what `DSH_LOCAL_KAFKA_JVM_OPTIONS` decides for it.

Runs its own single nodes on free ports, one at a time, the option sets alternated:
    .venv/bin/python -m bench.broker_start --runs 3 --idle 30
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.stack import cpu_seconds
from deploy.local.kafka import (
    SHORT_LIVED_JVM,
    KafkaCluster,
    class_archive,
    class_archive_refused,
    ensure_kafka_jars,
)
from deploy.local.processes import free_ports
from deploy.local.settings import LocalStackSettings

SERVER: str = LocalStackSettings.model_fields["kafka_jvm_options"].default  # `dsh up`'s
LEAN = " ".join(SHORT_LIVED_JVM)  # the test suite's


def _children_cpu() -> float:
    """CPU of the children reaped so far (each node is reaped when it stops)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_node(options: str, idle_s: float) -> dict[str, float]:
    """Format, start and idle one node; its CPU seconds for each."""
    home = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    kafka_port, controller_port, redis_port = free_ports(3)
    settings = LocalStackSettings(
        state_dir=home,
        kafka_port=kafka_port,
        controller_port=controller_port,
        redis_port=redis_port,
        kafka_jvm_options=options,
    )
    cluster = KafkaCluster(settings)
    try:
        before = _children_cpu()  # the format runs as a child; the node is read from /proc
        started = time.monotonic()
        cluster.start()
        format_cpu = _children_cpu() - before
        cluster.wait_ready()
        ready_s = time.monotonic() - started
        pid = cluster.nodes[0].process().pid()
        assert pid is not None
        start_cpu = cpu_seconds(pid)
        time.sleep(idle_s)
        idle_cpu = cpu_seconds(pid) - start_cpu
    finally:
        node = cluster.nodes[0].process().pid()
        cluster.stop()
        if node is not None:  # gone, and reaped: its CPU is not the next node's
            with contextlib.suppress(ChildProcessError):
                os.waitpid(node, 0)
        shutil.rmtree(home, ignore_errors=True)
    return {
        "format_cpu_s": format_cpu,
        "start_cpu_s": start_cpu,
        "ready_s": ready_s,
        "idle_cpu_s_per_min": idle_cpu * 60 / idle_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds each node idles")
    args = parser.parse_args()
    libs = ensure_kafka_jars(LocalStackSettings())
    archive, refused = class_archive(libs), class_archive_refused(libs)
    if not archive.exists():
        raise SystemExit(f"no class archive at {archive}: this JDK refused to make one")
    aside = archive.with_name(archive.name + ".bench-aside")
    cases = [(name, options, mapped) for mapped in (True, False) for name, options in
             (("server", SERVER), ("lean", LEAN))]  # fmt: skip
    figures: dict[tuple[str, bool], list[dict[str, float]]] = {}
    try:
        for _ in range(args.runs):
            for name, options, mapped in cases:
                if not mapped:  # and none made meanwhile
                    archive.rename(aside)
                    refused.write_text("bench.broker_start: a run without the archive\n")
                try:
                    figures.setdefault((name, mapped), []).append(one_node(options, args.idle))
                finally:
                    if not mapped:
                        refused.unlink()
                        aside.rename(archive)
    finally:
        if aside.exists():
            refused.unlink(missing_ok=True)
            aside.rename(archive)
    print(f"medians of {args.runs} runs, {args.idle:.0f} s idle each")
    print(f"{'options':<8} {'archive':<8} {'format':>7} {'start':>7} {'ready':>7} {'idle/min':>9}")
    for (name, mapped), runs in figures.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(
            f"{name:<8} {'yes' if mapped else 'no':<8} {median['format_cpu_s']:>6.1f}s "
            f"{median['start_cpu_s']:>6.1f}s {median['ready_s']:>6.1f}s "
            f"{median['idle_cpu_s_per_min']:>8.2f}s"
        )


if __name__ == "__main__":
    main()
