"""The fault-test harness: services as real processes, a pipelined load of many sessions
through ``SessionClient`` with every acknowledged append recorded client side, and the
history checker (every acknowledged event in the events topic exactly once, in order, seqs
contiguous per session, and the projectors' ``verify`` clean for every session)."""

from __future__ import annotations

import collections
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from pydantic import SecretStr

from producers import AppendTimeoutError, SessionClient
from projectors.keys import Keys
from schemas import HEADER_REQUEST, decode_event
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from servicekit.stacks import DUMP_SIGNAL
from tests.integration.projector_support import STREAM
from tests.support.builders import assistant, user
from tests.support.processes import CliProcess
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
REPO_FRAME = f'File "{REPO}/'  # a stack frame of the project's own code
PARTITIONS = 4
PROJECTIONS = ("surface", "transcript", "audit")
FIGURES = Path(os.environ.get("DSH_RELIABILITY_FIGURES", REPO / ".state" / "reliability.jsonl"))


@dataclass(frozen=True)
class Load:
    """How hard the harness pushes: ``DSH_RELIABILITY_LOAD=full`` for the documented run."""

    name: str
    sessions: int
    window: int  # appends in flight per session
    warmup_s: float  # load held before the fault
    after_s: float  # load held after recovery

    @classmethod
    def from_env(cls) -> Load:
        if os.environ.get("DSH_RELIABILITY_LOAD", "reduced") == "full":
            return cls("full", sessions=96, window=8, warmup_s=10.0, after_s=5.0)
        return cls("reduced", sessions=24, window=4, warmup_s=2.0, after_s=1.0)


def kafka_env(kafka: KafkaSettings) -> dict[str, str]:
    """``DSH_KAFKA_*`` for a child process, secrets included (they stay in the env)."""
    env = {}
    for name in KafkaSettings.model_fields:
        value = getattr(kafka, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[f"DSH_KAFKA_{name.upper()}"] = str(value)
    # librdkafka's debug log in the services' logs, to see what a coordinator answered when.
    debug = os.environ.get("DSH_RELIABILITY_KAFKA_DEBUG")
    if debug:
        env["DSH_KAFKA_DEBUG"] = debug
    return env


class Service(CliProcess):
    """A service the pipeline's supervisor keeps running: it restarts it when it exits."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        # Exit codes of the processes that exited on their own, each restarted by the supervisor.
        self.exit_codes: list[int] = []
        self.expected_down = False  # killed on purpose: the supervisor leaves it down
        clean = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
        super().__init__(args, clean | env, log_path)

    def start(self) -> None:
        super().start()
        self.expected_down = False  # only once the new process is there

    def kill(self) -> None:
        self.expected_down = True
        super().kill()


@dataclass
class Namespace:
    """One test's private names on the shared cluster: topics, groups, Redis keys."""

    kafka: KafkaSettings
    redis_url: str
    tmp: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    redis_env: dict[str, str] = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)  # every process started here
    # Service name → the Kafka settings it reaches the brokers with, where not ``kafka`` (a
    # network-fault test gives the process it cuts off a path of its own).
    kafka_of: dict[str, KafkaSettings] = field(default_factory=dict)
    # How the checker reads the topics, where not ``kafka`` (past the fault proxies).
    checker_kafka: KafkaSettings | None = None

    @property
    def key_prefix(self) -> str:
        return f"r{self.tag}"

    def writer_env(self, **extra: object) -> dict[str, str]:
        settings: dict[str, object] = {
            "group_id": f"dsh-writer-{self.tag}",
            "metrics_port": 0,
            "session_timeout_ms": 6000,
            "transaction_timeout_ms": 6000,
            "restore_timeout_ms": 60_000,
            "snapshot_every": 20,
        } | extra
        return kafka_env(self.kafka) | {
            f"DSH_WRITER_{k.upper()}": str(v) for k, v in settings.items()
        }

    def projector_env(self, **extra: object) -> dict[str, str]:
        settings: dict[str, object] = {
            "group_prefix": f"dsh-projector-{self.tag}",
            "key_prefix": self.key_prefix,
            "poll_timeout_s": 0.05,
            "sentinel_interval_s": 0.3,
            "session_timeout_ms": 6000,
        } | extra
        return (
            kafka_env(self.kafka)
            | {"DSH_REDIS_URL": self.redis_url}
            | self.redis_env
            | {f"DSH_PROJECTOR_{k.upper()}": str(v) for k, v in settings.items()}
        )

    def own_kafka_env(self, name: str) -> dict[str, str]:
        """``name``'s own ``DSH_KAFKA_*``, if it has its own path to the brokers."""
        return kafka_env(self.kafka_of[name]) if name in self.kafka_of else {}

    def writer(self, name: str, **extra: object) -> Service:
        env = self.writer_env(**extra) | self.own_kafka_env(name)
        service = Service(name, ["writer"], env, self.tmp / f"{name}.log")
        self.services.append(service)
        return service

    def projector(self, projection: str, name: str | None = None, **extra: object) -> Service:
        """A projector process; ``name`` tells apart several instances of one projection."""
        name = name or projection
        service = Service(
            name,
            ["project", projection],
            self.projector_env(**extra) | self.own_kafka_env(name),
            self.tmp / f"projector-{name}.log",
        )
        self.services.append(service)
        return service

    def stacks(self, kind: str = "writer") -> str:
        """The Python stacks of the live ``kind`` services (SIGUSR1: servicekit/stacks.py), for a
        failure message: what a process that stopped progressing is waiting in."""
        live = [s for s in self.services if s.args[0] == kind and s.alive()]
        sizes = {s.name: s.log_path.stat().st_size for s in live}
        for s in live:
            s.signal(DUMP_SIGNAL)
        time.sleep(1.0)
        dumps = []
        for s in live:
            with s.log_path.open("rb") as f:
                f.seek(sizes[s.name])
                text = f.read().decode(errors="replace")
            frames = [
                line for line in text.splitlines() if "(most recent" in line or REPO_FRAME in line
            ]
            dumps.append(f"[{s.name}] " + " | ".join(line.strip() for line in frames[:40]))
        return "\n".join(dumps)


def split(writers: list[Service]) -> bool:
    """Every partition owned, each by exactly one of the writers."""
    owned = [w.owned() for w in writers if w.alive()]
    flat = sorted(p for o in owned for p in (o or []))
    return flat == list(range(PARTITIONS)) and all(owned)


def sessions_spread(count: int, prefix: str = "s") -> list[str]:
    """Session ids spread evenly over the partitions."""
    buckets: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    per = -(-count // PARTITIONS)
    i = 0
    while any(len(b) < per for b in buckets.values()):
        sid = f"{prefix}-{uuid.uuid4().hex[:8]}-{i}"
        bucket = buckets[partition_for(sid, PARTITIONS)]
        if len(bucket) < per:
            bucket.append(sid)
        i += 1
    return [sid for i in range(per) for p in range(PARTITIONS) for sid in buckets[p][i : i + 1]][
        :count
    ]


# -- the load ---------------------------------------------------------------------------


def script_step(i: int, rid: str) -> tuple[str, Any, Any]:
    """The i-th append of a session: turns of six events, the two messages on the surface."""
    turn, k = i // 6 + 1, i % 6
    if k == 0:
        return "turn/start", {"turn": turn}, None
    if k == 1:
        return "user/message", user(rid, rid), "append"
    if k == 2:
        return "step/start", {"turn": turn, "step": 1}, None
    if k == 3:
        return "assistant/message", assistant(turn, 1, rid, "ok", (), STREAM), "append"
    if k == 4:
        return "step/end", {"turn": turn, "step": 1}, None
    return "turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None


@dataclass
class Ack:
    seq: int
    request_id: str
    at: float  # monotonic time of the acknowledgement
    latency: float = 0.0  # seconds from the first submission (retries included) to ``at``


class History:
    """What the client saw: acknowledgements per session, rejections, retries."""

    def __init__(self, sessions: list[str]) -> None:
        self.sessions = sessions
        self.acked: dict[str, list[Ack]] = {sid: [] for sid in sessions}
        self.rejected: list[tuple[str, str, str]] = []  # (session, request id, error)
        self.retries = 0
        self.last_timeout: dict[str, str] = {}  # session -> its latest AppendTimeoutError
        self.unresolved = 0
        self.abandoned = 0  # timed out after the load was told to stop (outcome unknown)
        self.lock = threading.Lock()

    def total(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def events_per_s(self) -> float:
        """Acknowledged appends per second, from the first acknowledgement to the last."""
        with self.lock:
            times = [a.at for acks in self.acked.values() for a in acks]
        return len(times) / (max(times) - min(times)) if len(times) > 1 else 0.0

    def count_at(self) -> dict[str, int]:
        with self.lock:
            return {sid: len(v) for sid, v in self.acked.items()}

    def last_seq(self) -> dict[str, int]:
        with self.lock:
            return {sid: (v[-1].seq if v else -1) for sid, v in self.acked.items()}

    def first_ack_after(self, t: float) -> dict[str, float | None]:
        with self.lock:
            return {sid: next((a.at for a in v if a.at > t), None) for sid, v in self.acked.items()}


class LoadDriver:
    """One thread per session keeping ``window`` appends in flight (``append_async``); a
    timed-out append is retried with the same request id (safe: answered, never doubled)."""

    def __init__(self, client: SessionClient, history: History, window: int) -> None:
        self.client = client
        self.history = history
        self.window = window
        self.stop_flag = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(sid,), daemon=True, name=f"load-{sid}")
            for sid in history.sessions
        ]

    def __enter__(self) -> LoadDriver:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_flag.set()
        deadline = time.monotonic() + 60
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), "load threads did not finish"

    def _submit(self, sid: str, i: int, rid: str) -> Future[Any]:
        type_, data, op = script_step(i, rid)
        return self.client.append_async(sid, type_, data, surface_op=op, request_id=rid)

    def _run(self, sid: str) -> None:
        self._drive(sid, None)

    def _drive(self, sid: str, limit: int | None) -> bool:
        """Appends to ``sid`` until told to stop or, with a ``limit``, that many were
        acknowledged (then True: the session is done and all went well)."""
        h = self.history
        in_flight: collections.deque[tuple[int, str, float, Future[Any]]] = collections.deque()
        i = 0
        while True:
            while (
                not self.stop_flag.is_set()
                and len(in_flight) < self.window
                and (limit is None or i < limit)
            ):
                rid = f"{sid}/{i}"
                in_flight.append((i, rid, time.monotonic(), self._submit(sid, i, rid)))
                i += 1
            if not in_flight:
                return not self.stop_flag.is_set()
            n, rid, sent, future = in_flight.popleft()
            for _attempt in range(30):
                try:
                    ev = future.result()
                except AppendTimeoutError as exc:
                    if self.stop_flag.is_set():
                        # Winding down: an unknown outcome is simply not acknowledged.
                        with h.lock:
                            h.abandoned += 1
                        break
                    with h.lock:
                        h.retries += 1
                        h.last_timeout[sid] = str(exc)
                    future = self._submit(sid, n, rid)
                    continue
                except Exception as exc:
                    with h.lock:
                        h.rejected.append((sid, rid, f"{type(exc).__name__}: {exc}"))
                    # Later appends of this session depend on this one: stop the session.
                    for *_, f in in_flight:
                        f.cancel()
                    return False
                now = time.monotonic()
                with h.lock:
                    h.acked[sid].append(Ack(ev.seq, rid, now, now - sent))
                break
            else:
                with h.lock:
                    h.unresolved += 1
                return False
            if self.stop_flag.is_set() and h.abandoned:
                return False


# -- the checker ------------------------------------------------------------------------


@dataclass
class Verdict:
    acknowledged: int
    lost: int
    duplicated: int
    out_of_order: list[str]
    mismatched: list[str]
    events_in_topic: int

    def assert_clean(self) -> None:
        assert self.lost == 0, f"{self.lost} acknowledged appends lost"
        assert self.duplicated == 0, f"{self.duplicated} appends published twice"
        assert not self.out_of_order, self.out_of_order[:5]
        assert not self.mismatched, self.mismatched[:5]


def read_topic(kafka: KafkaSettings, topic: str, timeout_s: float = 60.0) -> list[Any]:
    """Every record committed up to the call, partition by partition in offset order.

    A partition is read up to its high watermark as of the call. Waiting for an end-of-partition
    event instead never ends while writers keep opening transactions on it under load: the
    read_committed view stops at the last stable offset, short of the moving high watermark.
    """
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": f"checker-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10, False)[1] for p in parts
        }
        pending, out = {p for p in parts if ends[p] > 0}, []
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"no end of {topic} in {timeout_s}s"
            # Past the snapshot's end (commit markers included) the partition is done.
            for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
            for m in consumer.consume(1000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                        continue
                    raise AssertionError(f"reading {topic}: {err}")
                out.append(m)
        return out
    finally:
        consumer.close()


def check_history(kafka: KafkaSettings, history: History) -> Verdict:
    """Jepsen-style: the client's acknowledgements against the topic's committed records."""
    in_topic: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for m in read_topic(kafka, kafka.topic("events")):
        record = decode_event(m.value())
        rid = dict(m.headers() or []).get(HEADER_REQUEST, b"").decode()
        in_topic[record.session_id].append((record.event["seq"], rid))
    lost = duplicated = 0
    out_of_order, mismatched = [], []
    for sid in history.sessions:
        events = in_topic.get(sid, [])
        seqs = [s for s, _ in events]
        if seqs != list(range(len(seqs))):
            out_of_order.append(f"{sid}: seqs in topic order {seqs[:20]}…")
        rids = [r for _, r in events]
        duplicated += len(rids) - len(set(rids))
        where = {r: s for s, r in events}
        for ack in history.acked[sid]:
            if ack.request_id not in where:
                lost += 1
            elif where[ack.request_id] != ack.seq:
                mismatched.append(
                    f"{sid}: {ack.request_id} acked as {ack.seq}, in topic as "
                    f"{where[ack.request_id]}"
                )
    return Verdict(
        history.total(),
        lost,
        duplicated,
        out_of_order,
        mismatched,
        sum(len(v) for v in in_topic.values()),
    )


def lagging(
    client: redis.Redis, prefix: str, targets: dict[str, int], projections: Iterable[str]
) -> dict[str, list[str]] | None:
    """Per projection, the sessions it has not applied up to their target seq (one pipeline);
    None while Redis cannot be read."""
    pipe = client.pipeline(transaction=False)
    pairs = [(p, sid) for p in projections for sid, seq in targets.items() if seq >= 0]
    for p, sid in pairs:
        pipe.hget(Keys(prefix).meta(p, sid), "applied")
    try:
        values = pipe.execute()
    except redis.RedisError:
        return None
    behind: dict[str, list[str]] = {}
    for (p, sid), v in zip(pairs, values, strict=True):
        if v is None or int(v) < targets[sid]:
            behind.setdefault(p, []).append(sid)
    return behind


def projections_reach(
    client: redis.Redis, prefix: str, targets: dict[str, int], projections: Iterable[str]
) -> bool:
    return lagging(client, prefix, targets, projections) == {}


def projections_behind(
    client: redis.Redis, prefix: str, targets: dict[str, int], projections: Iterable[str]
) -> str:
    """For a failure message: how many sessions each projection has not caught up with."""
    behind = lagging(client, prefix, targets, projections)
    if behind is None:
        return "Redis cannot be read"
    return (
        "; ".join(
            f"{p}: {len(late)} of {len(targets)} sessions behind, e.g. {late[:3]}"
            for p, late in behind.items()
        )
        or "none behind"
    )


def topic_ends(kafka: KafkaSettings, history: History) -> dict[str, int]:
    """The last committed seq per session in the topic (the projectors' target)."""
    last: dict[str, int] = {sid: -1 for sid in history.sessions}
    for m in read_topic(kafka, kafka.topic("events")):
        record = decode_event(m.value())
        if record.session_id in last:
            last[record.session_id] = max(last[record.session_id], record.event["seq"])
    return last


def verify_all(ns: Namespace, client: redis.Redis, sessions: list[str], timeout_s: float) -> float:
    """Wait (bounded) for all three projections to reach the topic's end, then run the
    projectors' verify for every session. Returns the seconds the catch-up took."""
    from projectors.keys import Keys
    from projectors.read_api import Reader
    from projectors.topic_reader import read_sessions
    from projectors.verify import verify

    history = History(sessions)
    targets = topic_ends(ns.kafka, history)
    took = wait_for(
        lambda: projections_reach(client, ns.key_prefix, targets, PROJECTIONS),
        timeout_s,
        "the projectors to reach the end of the log",
        explain=lambda: (
            projections_behind(client, ns.key_prefix, targets, PROJECTIONS)
            + "\n"
            + ns.stacks("project")
        ),
    )
    reader = Reader(client, Keys(ns.key_prefix))
    by_partition: dict[int, list[str]] = collections.defaultdict(list)
    for sid in sessions:
        by_partition[partition_for(sid, PARTITIONS)].append(sid)
    failures = []
    for p, sids in by_partition.items():
        items = read_sessions(ns.kafka, ns.kafka.topic("events"), p, sids)
        for sid in sids:
            report = verify(sid, items[sid], reader, {})
            if not report.ok:
                failures.append(f"{sid}: {report.differences[:2]}")
    assert not failures, f"verify failed for {len(failures)} sessions: {failures[:3]}"
    return took


def record_figures(name: str, load: Load, verdict: Verdict, **extra: Any) -> dict[str, Any]:
    """One line of figures per run (appended to ``FIGURES``), also printed."""
    row = {
        "test": name,
        "load": load.name,
        "sessions": load.sessions,
        "window": load.window,
        "acknowledged": verdict.acknowledged,
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "events_in_topic": verdict.events_in_topic,
        **{k: round(v, 2) if isinstance(v, float) else v for k, v in extra.items()},
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print("RELIABILITY", json.dumps(row))
    return row


def recovery_seconds(
    history: History, fault_at: float, counts_at_fault: dict[str, int], window: int
) -> float:
    """Fault → every session has an acknowledged append that was submitted after the fault
    (its ``count + window``-th: at most ``window`` were in flight then); the slowest one."""
    with history.lock:
        times = [
            acks[counts_at_fault[sid] + window].at
            for sid, acks in history.acked.items()
            if len(acks) > counts_at_fault[sid] + window
        ]
    assert len(times) == len(history.sessions), "a session never recovered"
    return max(times) - fault_at


def longest_stall(history: History, since: float) -> float:
    """The longest any session waited between two acknowledgements, from ``since`` on (the
    wait that spans ``since`` counts whole)."""
    longest = 0.0
    with history.lock:
        for acks in history.acked.values():
            for before, after in pairwise(a.at for a in acks):
                if after >= since:
                    longest = max(longest, after - before)
    return longest


class VisibilityWatch:
    """Samples a projection's applied seq of every session against the client's last
    acknowledgement, and keeps the longest time any session had acknowledged events that were
    not visible and its applied seq did not move: how long a reader waited, at worst."""

    def __init__(self, client: redis.Redis, prefix: str, history: History, projection: str) -> None:
        self.client, self.prefix, self.history, self.projection = (
            client,
            prefix,
            history,
            projection,
        )
        self.per_session: dict[str, float] = {}  # each session's longest
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> VisibilityWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        behind_since: dict[str, tuple[int, float]] = {}  # session → (applied seq, since)
        sessions = self.history.sessions
        keys = [Keys(self.prefix).meta(self.projection, sid) for sid in sessions]
        while not self._stop.wait(0.05):
            acked = self.history.last_seq()
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hget(key, "applied")
            try:
                values = pipe.execute()
            except redis.RedisError:
                continue
            now = time.monotonic()
            for sid, value in zip(sessions, values, strict=True):
                applied = -1 if value is None else int(value)
                if applied >= acked[sid]:
                    behind_since.pop(sid, None)
                    continue
                seen = behind_since.get(sid)
                if seen is None or seen[0] != applied:
                    behind_since[sid] = (applied, now)
                else:
                    waited = now - seen[1]
                    self.per_session[sid] = max(self.per_session.get(sid, 0.0), waited)

    # Read while the sampler writes: list() copies the values in one step (no thread switch
    # inside it), where iterating the live dict could meet it resized.
    @property
    def longest(self) -> float:
        return max(list(self.per_session.values()), default=0.0)

    def sessions_over(self, seconds: float) -> int:
        """How many sessions lagged longer than ``seconds`` at least once."""
        return sum(1 for waited in list(self.per_session.values()) if waited > seconds)


def recovered(history: History, counts_at_fault: dict[str, int], window: int) -> bool:
    """Every session acknowledged more than a window since the fault. A rejected append
    stops its session for good, so it fails at once rather than after the whole bound."""
    with history.lock:
        rejected = list(history.rejected)
    if rejected:
        raise AssertionError(f"{len(rejected)} appends rejected, first: {rejected[:3]}")
    now = history.count_at()
    return all(now[sid] > counts_at_fault[sid] + window for sid in history.sessions)


def not_recovered(history: History, counts_at_fault: dict[str, int], window: int) -> str:
    """The sessions ``recovered`` still waits for, with their partition and latest timeout."""
    now = history.count_at()
    with history.lock:
        last_timeout = dict(history.last_timeout)
        retries = history.retries
    stuck = [
        f"{sid} (partition {partition_for(sid, PARTITIONS)}, {now[sid] - counts_at_fault[sid]}"
        f" acked since the fault; {last_timeout.get(sid, 'no timeout')})"
        for sid in history.sessions
        if now[sid] <= counts_at_fault[sid] + window
    ]
    return f"{len(stuck)} sessions, {retries} retries in all: " + "; ".join(stuck)


class Pipeline:
    """Two writers and the three projectors, each its own process, in one namespace."""

    def __init__(
        self,
        ns: Namespace,
        projectors: bool = True,
        first_writer: Mapping[str, object] | None = None,
        **writer_extra: object,
    ) -> None:
        """``first_writer``: settings of writer-a's first process only (a failpoint, say);
        the supervisor restarts it without them."""
        self.ns = ns
        self.writers = [
            ns.writer("writer-a", **writer_extra, **(first_writer or {})),
            ns.writer("writer-b", **writer_extra),
        ]
        first = self.writers[0]
        for key in first_writer or {}:
            first.env.pop(f"DSH_WRITER_{key.upper()}", None)
        first.env |= ns.writer_env(**writer_extra) | ns.own_kafka_env(first.name)
        self.projectors = {p: ns.projector(p) for p in PROJECTIONS} if projectors else {}
        self._closing = threading.Event()
        self._supervisor = threading.Thread(target=self.supervise, daemon=True)

    def supervise(self) -> None:
        """What systemd or Kubernetes does: start again a service that exited by itself (a
        writer stops on a fatal producer error by design, to restart as a fresh member)."""
        while not self._closing.wait(0.2):
            for s in self.services():
                with s.lock:
                    crashed = not s.expected_down and not s.alive()
                if crashed and not self._closing.is_set():
                    assert s.process is not None
                    s.exit_codes.append(s.process.returncode)
                    s.start()

    def restarts(self) -> dict[str, int]:
        return {s.name: len(s.exit_codes) for s in self.services() if s.exit_codes}

    def __enter__(self) -> Pipeline:
        self._supervisor.start()
        try:
            wait_for(lambda: split(self.writers), 90, "two writers splitting the partitions")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()
        if self._supervisor.is_alive():
            self._supervisor.join(5)
        for s in [*self.writers, *self.projectors.values()]:
            s.close()

    def services(self) -> list[Service]:
        return [*self.writers, *self.projectors.values()]


def run_load(
    ns: Namespace,
    load: Load,
    sessions: list[str],
    fault: Callable[[History, dict[str, int]], dict[str, Any]],
    client_timeout: float = 8.0,
    client_kafka: KafkaSettings | None = None,
) -> tuple[History, dict[str, Any]]:
    """Hold the load, inject the fault, wait (bounded) until every session is served again,
    hold the load a little longer, stop. ``fault(history, counts)`` returns extra figures.
    ``client_kafka``: how the load's client reaches the brokers (default ``ns.kafka``)."""
    history = History(sessions)
    with (
        SessionClient(settings=client_kafka or ns.kafka, timeout=client_timeout) as client,
        LoadDriver(client, history, load.window),
    ):
        wait_for(lambda: all(n > load.window for n in history.count_at().values()), 180, "load")
        time.sleep(load.warmup_s)
        counts = history.count_at()
        fault_at = time.monotonic()
        extra = fault(history, counts)
        # In-process recovery after a broker kill (restores retried while leadership and the
        # coordinators move) takes 20-40 s; the bound leaves room for a loaded CI machine.
        wait_for(
            lambda: recovered(history, counts, load.window),
            180,
            "every session served",
            explain=lambda: f"{not_recovered(history, counts, load.window)}\n{ns.stacks()}",
        )
        extra.setdefault("recovery_s", recovery_seconds(history, fault_at, counts, load.window))
        time.sleep(load.after_s)
    assert not history.rejected, history.rejected[:3]
    assert history.unresolved == 0
    extra["retries"] = history.retries
    return history, extra


def judge(
    name: str,
    pipeline: Pipeline,
    ns: Namespace,
    load: Load,
    client: redis.Redis,
    history: History,
    extra: dict[str, Any],
) -> None:
    """The history checked clean, every session verified, the figures recorded."""
    extra["service_restarts"] = pipeline.restarts()
    extra["events_per_s"] = history.events_per_s()
    verdict = check_history(ns.checker_kafka or ns.kafka, history)
    verdict.assert_clean()
    extra["projector_catch_up_s"] = verify_all(ns, client, history.sessions, 120)
    record_figures(name, load, verdict, **extra)
