"""The nemesis soak: a steady load of agent sessions through the 3-broker cluster, two writers
and the three projectors, while a scheduler injects one fault at a time, at random, from every
class of :mod:`tests.reliability.nemesis`, with a recovery gap between two faults.

Recorded: every service's RSS over time, the appends' p99 and throughput per minute, each
fault's recovery time and the load held through it, rebalances and restores from the services'
logs; at the end the history check (nothing lost or duplicated, seqs contiguous) and ``verify``
of every session against the three projections.

    flock /tmp/heavy.lock python -m tests.reliability.soak --minutes 30

starts its own cluster (``--help`` for the load and the gaps), writes the figures to
``.state/soak/`` and the plots to ``docs/``; ``tests/reliability/test_soak.py`` runs three
minutes of it at the end of ``make test`` (so in CI), alone on the reliability suite's cluster."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

from deploy.local.stack import LocalStack
from producers import SessionClient
from tests.reliability.harness import (
    PARTITIONS,
    PROJECTIONS,
    REPO,
    History,
    LoadDriver,
    Namespace,
    Pipeline,
    check_history,
    projections_behind,
    projections_reach,
    verify_all,
)
from tests.reliability.nemesis import ALL_CLASSES, FaultClass, Target
from tests.support.waiting import wait_for

STATE = REPO / ".state" / "soak"
SAMPLE_EVERY_S = 5.0
RECOVERY_BOUND_S = 180.0


@dataclass(frozen=True)
class SoakConfig:
    minutes: float = 30.0
    slots: int = 96  # sessions appended to at once; each runs ``session_events`` then a new one
    window: int = 8  # appends in flight per session
    session_events: int = 300  # fifty turns of six events
    warmup_s: float = 60.0  # load only, before the first fault
    gap_s: tuple[float, float] = (20.0, 40.0)  # load only, between a recovery and the next fault
    seed: int = 0
    classes: tuple[str, ...] = tuple(c.name for c in ALL_CLASSES)
    # Each writer's DSH_WRITER_MAX_RESIDENT_BYTES: small, so that finished sessions leave the
    # writers' memory within the run and their RSS levels off after warm-up.
    writer_resident_bytes: int = 16 * 1024 * 1024


class ChurningLoad(LoadDriver):
    """``slots`` threads, each appending to one session at a time: ``session_events`` appends
    (whole turns), then on to a fresh session, as agent sessions start and end."""

    def __init__(self, client: SessionClient, history: History, config: SoakConfig) -> None:
        super().__init__(client, History([]), config.window)
        self.history = history
        self.limit = config.session_events
        self.acked_per_slot = [0] * config.slots  # by the slot's finished sessions
        self.current: list[str | None] = [None] * config.slots
        self.threads = [
            threading.Thread(target=self._slot, args=(n,), daemon=True, name=f"slot-{n}")
            for n in range(config.slots)
        ]

    def _slot(self, n: int) -> None:
        while not self.stop_flag.is_set():
            sid = f"soak-{uuid.uuid4().hex[:10]}-{n}"
            with self.history.lock:
                self.history.sessions.append(sid)
                self.history.acked[sid] = []
                self.current[n] = sid
            done = self._drive(sid, self.limit)
            with self.history.lock:
                self.acked_per_slot[n] += len(self.history.acked[sid])
                self.current[n] = None
            if not done:
                return

    def current_targets(self) -> dict[str, int]:
        """The last acknowledged seq of each session under way."""
        with self.history.lock:
            return {
                sid: self.history.acked[sid][-1].seq
                for sid in self.current
                if sid is not None and self.history.acked[sid]
            }

    def slot_counts(self) -> list[int]:
        """Acknowledged appends per slot, the session under way included."""
        with self.history.lock:
            acked = self.history.acked
            return [
                done + (len(acked[sid]) if sid is not None else 0)
                for done, sid in zip(self.acked_per_slot, self.current, strict=True)
            ]


@dataclass
class FaultRecord:
    fault: str
    detail: str
    at_s: float  # since the start of the load
    recovery_s: float  # fault injected -> every slot served a window and more again
    read_models_s: float  # fault injected -> every projection applied what was acked by then
    acked_during: int  # appends acknowledged from the fault to the recovery
    events_per_s_during: float


@dataclass
class SoakResult:
    config: dict[str, Any]
    faults: list[FaultRecord] = field(default_factory=list)
    rss_mb: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name -> (t, MB)
    cpu_s: dict[str, float] = field(default_factory=dict)  # name -> CPU seconds after warm-up
    per_minute: list[dict[str, float]] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    sessions: int = 0


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time the process has used so far."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


class RssSampler:
    """Every few seconds, the RSS of each service process (the current one of its name), and
    the CPU time each used after ``warmup_s`` (the soak's driver, "client", included)."""

    def __init__(self, target: Target, started: float, result: SoakResult, warmup_s: float):
        self.target, self.started, self.result = target, started, result
        self.warmup_s = warmup_s
        self._last_cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss")

    def pids(self) -> dict[str, int | None]:
        pids: dict[str, int | None] = {s.name: s.pid for s in self.target.services() if s.alive()}
        for node in self.target.cluster.kafka.nodes:
            pids[f"broker-{node.node_id}"] = node.process().pid()
        pids["redis"] = self.target.cluster.redis.process.pid()
        pids["client"] = os.getpid()
        return pids

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            t = time.monotonic() - self.started
            for name, pid in self.pids().items():
                mb = rss_mb(pid)
                if mb is not None:
                    self.result.rss_mb.setdefault(name, []).append((round(t, 1), round(mb, 1)))
                used = cpu_seconds(pid)
                if pid is None or used is None:
                    continue
                if t >= self.warmup_s and pid in self._last_cpu:
                    spent = used - self._last_cpu[pid]
                    self.result.cpu_s[name] = self.result.cpu_s.get(name, 0.0) + spent
                self._last_cpu[pid] = used

    @contextmanager
    def running(self) -> Iterator[None]:
        self._thread.start()
        try:
            yield
        finally:
            self._stop.set()
            self._thread.join(10)


def per_minute(history: History, started: float) -> list[dict[str, float]]:
    """Acknowledged appends per minute: events/s and the latency p50/p99 (ms) of that minute."""
    buckets: dict[int, list[float]] = {}
    with history.lock:
        for acks in history.acked.values():
            for a in acks:
                buckets.setdefault(int((a.at - started) // 60), []).append(a.latency)
    rows = []
    for minute in sorted(buckets):
        lat = sorted(buckets[minute])
        rows.append(
            {
                "minute": minute + 1,
                "events_per_s": round(len(lat) / 60, 1),
                "p50_ms": round(1000 * lat[len(lat) // 2], 1),
                "p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1),
            }
        )
    return rows


def wait_recovered(load: ChurningLoad, at_fault: list[int], window: int) -> float:
    """Seconds until every slot acknowledged more than ``window`` appends since ``at_fault``
    (at most ``window`` were in flight at the fault); fails on a rejected append."""
    started = time.monotonic()

    def served() -> bool:
        with load.history.lock:
            rejected = list(load.history.rejected)
        assert not rejected, f"{len(rejected)} appends rejected, first: {rejected[:3]}"
        now = load.slot_counts()
        return all(n > a + window for n, a in zip(now, at_fault, strict=True))

    wait_for(served, RECOVERY_BOUND_S, "every session served again")
    return time.monotonic() - started


def wait_projected(ns: Namespace, targets: dict[str, int]) -> None:
    """Until all three projections applied each session up to its target seq."""
    store = redis.Redis.from_url(ns.redis_url, socket_timeout=5)
    try:
        wait_for(
            lambda: projections_reach(store, ns.key_prefix, targets, PROJECTIONS),
            RECOVERY_BOUND_S,
            "the projections caught up",
            explain=lambda: projections_behind(store, ns.key_prefix, targets, PROJECTIONS),
        )
    finally:
        store.close()


def log_counts(target: Target) -> dict[str, int]:
    """Rebalances, restores and rebuilds, as the services logged them."""
    writer_logs = "".join(w.log() for w in target.pipeline.writers)
    projector_logs = "".join(p.log() for p in target.pipeline.projectors.values())
    every = writer_logs + projector_logs
    return {
        "partitions_assigned": every.count("partitions assigned"),
        "partitions_revoked": every.count("partitions revoked"),
        "partitions_lost": every.count("partitions lost"),
        "writer_partition_restores": writer_logs.count(" restored in "),
        "projector_session_rebuilds": projector_logs.count("rebuilding session"),
        "projector_partition_replays": projector_logs.count("replaying partition"),
        "service_exits_restarted": sum(target.pipeline.restarts().values()),
    }


def soak(ns: Namespace, cluster: LocalStack, config: SoakConfig) -> SoakResult:
    """Run the soak on ``cluster`` in namespace ``ns``; the caller checks the result."""
    rng = random.Random(config.seed)
    classes = [c for c in ALL_CLASSES if c.name in config.classes]
    result = SoakResult(config=asdict(config))
    history = History([])
    with Pipeline(ns, max_resident_bytes=config.writer_resident_bytes) as pipeline:
        target = Target(pipeline, cluster, ns)
        with SessionClient(settings=ns.kafka, timeout=8.0) as client:
            load = ChurningLoad(client, history, config)
            started = time.monotonic()
            ends = started + config.minutes * 60
            with RssSampler(target, started, result, config.warmup_s).running(), load:
                time.sleep(min(config.warmup_s, config.minutes * 60))
                deck: list[FaultClass] = []
                while classes and time.monotonic() < ends - 30:
                    if not deck:  # every class once, in a random order, then again
                        deck = rng.sample(classes, len(classes))
                    fault = deck.pop()
                    try:
                        result.faults.append(_one_fault(fault, target, load, rng, started, config))
                    except AssertionError as failed:  # kept for the record; the checks still run
                        result.verdict["fault_failed"] = f"{fault.name}: {failed}"[:2000]
                        break
                    time.sleep(min(rng.uniform(*config.gap_s), max(0.0, ends - time.monotonic())))
                time.sleep(max(0.0, ends - time.monotonic()))
        result.per_minute = per_minute(history, started)
        result.counts = log_counts(target)
        result.counts["rejected"] = len(history.rejected)
        result.counts["unresolved"] = history.unresolved
        result.counts["client_retries"] = history.retries
        verdict = check_history(ns.kafka, history)
        result.verdict |= asdict(verdict)
        result.sessions = len(history.sessions)
        served = [s for s in history.sessions if history.acked[s]]
        store = redis.Redis.from_url(ns.redis_url)
        try:
            result.verdict["projector_catch_up_s"] = round(verify_all(ns, store, served, 300), 2)
            result.verdict["verified_sessions"] = len(served)
        except AssertionError as failed:
            result.verdict["verify_failed"] = str(failed)[:2000]
        finally:
            store.close()
    return result


def _one_fault(
    fault: FaultClass,
    target: Target,
    load: ChurningLoad,
    rng: random.Random,
    started: float,
    config: SoakConfig,
) -> FaultRecord:
    before, at_fault = load.history.total(), load.slot_counts()
    injected = time.monotonic()
    detail = fault.inject(target, rng)
    targets = load.current_targets()
    wait_recovered(load, at_fault, config.window)
    recovery = time.monotonic() - injected
    during = load.history.total() - before
    wait_projected(target.ns, targets)
    read_models = time.monotonic() - injected
    fault.settle(target)
    record = FaultRecord(
        fault.name,
        detail,
        round(injected - started, 1),
        round(recovery, 2),
        round(read_models, 2),
        during,
        round(during / recovery, 1),
    )
    print("SOAK fault", json.dumps(asdict(record)), flush=True)
    return record


def assert_clean(result: SoakResult) -> None:
    """Nothing lost, doubled or out of order, every append answered, every session verified."""
    v = result.verdict
    assert v["lost"] == 0, f"{v['lost']} acknowledged appends lost"
    assert v["duplicated"] == 0, f"{v['duplicated']} appends published twice"
    assert not v["out_of_order"] and not v["mismatched"], (v["out_of_order"], v["mismatched"])
    assert result.counts["rejected"] == 0 and result.counts["unresolved"] == 0, result.counts
    assert "verify_failed" not in v, v["verify_failed"]
    assert "fault_failed" not in v, v["fault_failed"]


def summary(result: SoakResult) -> dict[str, Any]:
    """The figures RELIABILITY.md quotes: RSS per service after warm-up and at the end, p99 per
    minute, per-fault recovery."""
    warm = result.config["warmup_s"]
    rss = {}
    for name, points in result.rss_mb.items():
        after = [mb for t, mb in points if t >= warm]
        if after:
            rss[name] = {
                "after_warmup_mb": after[0],
                "end_mb": after[-1],
                "max_mb": max(after),
            }
    measured_s = result.config["minutes"] * 60 - warm
    cpu = {
        name: round(100 * spent / measured_s, 1)
        for name, spent in sorted(result.cpu_s.items(), key=lambda kv: -kv[1])
    }
    p99 = [row["p99_ms"] for row in result.per_minute]
    rates = [row["events_per_s"] for row in result.per_minute]
    return {
        "rss": rss,
        "cpu_percent_of_one_core": cpu,
        "p99_ms_median": statistics.median(p99) if p99 else None,
        "p99_ms_max": max(p99, default=None),
        "events_per_s_median": statistics.median(rates) if rates else None,
        "faults": len(result.faults),
        "per_class": {
            name: {
                "appends_recovered_s": [f.recovery_s for f in result.faults if f.fault == name],
                "read_models_s": [f.read_models_s for f in result.faults if f.fault == name],
            }
            for name in result.config["classes"]
        },
    }


def _own_cluster(state: Path) -> LocalStack:
    from tests.support.clusters import three_nodes

    return LocalStack(three_nodes(state / "stack", PARTITIONS), persistent=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sessions", type=int, default=96, help="sessions appended to at once")
    parser.add_argument("--window", type=int, default=8, help="appends in flight per session")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before the first fault")
    parser.add_argument("--gap", type=float, nargs=2, default=(20.0, 40.0), metavar=("MIN", "MAX"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--faults", default=",".join(c.name for c in ALL_CLASSES))
    parser.add_argument("--plots", type=Path, default=REPO / "docs", help="where the PNGs go")
    parser.add_argument(
        "--writer-resident-mib",
        type=float,
        default=16.0,
        help="each writer's DSH_WRITER_MAX_RESIDENT_BYTES, in MiB (0: no bound)",
    )
    args = parser.parse_args(argv)
    config = SoakConfig(
        minutes=args.minutes,
        slots=args.sessions,
        window=args.window,
        warmup_s=args.warmup,
        gap_s=tuple(args.gap),
        seed=args.seed,
        classes=tuple(c for c in args.faults.split(",") if c),
        writer_resident_bytes=int(args.writer_resident_mib * 1024 * 1024),
    )
    from tests.support.topics import fresh_topics

    run_dir = STATE / time.strftime("%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    cluster = _own_cluster(run_dir)
    try:
        cluster.up(create_topics=False)
        kafka = fresh_topics(cluster.settings.bootstrap_servers(), PARTITIONS, "soak")
        ns = Namespace(kafka, cluster.settings.redis_url(), run_dir)
        result = soak(ns, cluster, config)
    finally:
        cluster.down()
    out = {**asdict(result), "summary": summary(result)}
    (run_dir / "soak.json").write_text(json.dumps(out, indent=1))
    from tests.reliability.soak_plots import plot

    plot(result, args.plots)
    print(json.dumps(out["summary"], indent=1))
    print(json.dumps(result.verdict | result.counts))
    print(f"figures: {run_dir / 'soak.json'}; plots in {args.plots}")
    assert_clean(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
