"""Helpers for the projector tests: a scripted agent session built with the in-process core,
its events published as the writer would (key = session id, Avro single-object value, murmur2
partition, in a Kafka transaction), and projectors run in threads or processes."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from pydantic import SecretStr

import dsh
from interpreters import offload_images
from projectors.records import encode
from schemas.records import event_headers
from servicekit.partitioning import PRODUCER_PARTITIONER
from servicekit.settings import KafkaSettings, RedisSettings
from tests.support.builders import assistant, system, text, tool_call, tool_result, user
from tests.support.processes import CliProcess
from tests.support.waiting import wait_for

CLOCK_MS = 1_700_000_000_000
OFFLOAD = "interpreters.image_offload:offload_images"


# A stream that delivered text.
STREAM = [{"t": 0, "kind": "text"}]
# A tool's failure, as a failed tool/result carries it.
ECHO_FAILED = {"name": "EchoError", "code": "ECHO_FAILED", "reason": "boom"}


@dataclass
class Script:
    session: dsh.Session
    summary_seq: int  # the compaction summary (a user/message replace)
    summarized: tuple[int, ...]  # the nodes it replaced
    failed_result_seq: int  # a failed tool/result, appended
    rewrite_seq: int  # its rewrite (a tool/result replace)
    offload_seq: int  # the image/offload projection
    image_seq: int  # the user message whose image was offloaded


def scripted_session(session_id: str, turns: int = 3) -> Script:
    """Turns with tool calls, a failed tool and its rewrite, an offloaded image, a compaction."""
    s = dsh.Session.create(session_id, clock=lambda: CLOCK_MS)
    s.register_message_projection("image/offload", offload_images)
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("system/message", system(1, 1), "append")
    s.append("user/message", user("u1", "list files"), "append")
    s.append("request/header", {"header": {"config": {"temperature": 0}}, "reason": "initial"})
    s.append("request/context", {"provider": "mock", "model": "m1", "contextWindow": 8000})
    s.append("assistant/attempt", {"turn": 1, "step": 1, "stream": []})
    s.append("assistant/message", assistant(1, 1, "a1", "calling", ["c1"], STREAM), "append")
    call = s.append("tool/call", tool_call("c1"))
    failed = s.append(
        "tool/result", tool_result("c1", 1, 1, "boom", error=ECHO_FAILED), "append", [call.seq]
    )
    rewrite = s.append(
        "tool/result",
        tool_result("c1", 1, 1, "boom (trimmed)", error=ECHO_FAILED),
        dsh.Replace(failed.seq, failed.seq),
        [failed.seq],
    )
    s.append("step/end", {"turn": 1, "step": 1})
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    s.append("turn/start", {"turn": 2})
    image = s.append(
        "user/message",
        user(
            "u2",
            content=[
                text("what is this?"),
                {"type": "image", "mediaType": "image/png", "data": "iVBORw0KGgo="},
            ],
        ),
        "append",
    )
    s.append("step/start", {"turn": 2, "step": 1})
    offload = s.append("image/offload", {"seqs": [image.seq], "ref": "blob://img-1"})
    s.append("assistant/message", assistant(2, 1, "a2", "a cat", (), STREAM), "append")
    s.append("step/end", {"turn": 2, "step": 1})
    s.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    for turn in range(3, turns + 1):
        s.append("turn/start", {"turn": turn})
        s.append("user/message", user(f"u{turn}", f"question {turn}"), "append")
        s.append("step/start", {"turn": turn, "step": 1})
        s.append(
            "assistant/message",
            assistant(turn, 1, f"a{turn}", f"answer {turn}", (), STREAM),
            "append",
        )
        s.append("step/end", {"turn": turn, "step": 1})
        s.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    # Compaction: turn 1 after the system prompt becomes one summary citing what it hides.
    nodes = s.surface.nodes
    shadowed = nodes[1:4]
    s.append("compaction/start", {"reason": "context"})
    summary = s.append(
        "user/message",
        user("summary", "summary of the conversation so far"),
        dsh.Replace(shadowed[0], shadowed[-1]),
        list(shadowed),
    )
    s.append("compaction/end", {"summary": summary.seq})
    return Script(s, summary.seq, tuple(shadowed), failed.seq, rewrite.seq, offload.seq, image.seq)


def forked(parent: dsh.Session, child_id: str) -> dsh.Session:
    """A fork of ``parent`` at its end (a turn boundary), then one turn of its own."""
    child = parent.fork(child_id)
    turn = 1 + max(e.data["turn"] for e in child.events() if e.type == "turn/start")
    child.append("turn/start", {"turn": turn})
    child.append("user/message", user("fork-q", "and in the fork?"), "append")
    child.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return child


def simple_session(session_id: str, turns: int) -> dsh.Session:
    s = dsh.Session.create(session_id, clock=lambda: CLOCK_MS)
    for turn in range(1, turns + 1):
        s.append("turn/start", {"turn": turn})
        s.append("user/message", user(f"u{turn}", f"question {turn}"), "append")
        s.append("step/start", {"turn": turn, "step": 1})
        s.append(
            "assistant/message",
            assistant(turn, 1, f"a{turn}", f"answer {turn}", (), STREAM),
            "append",
        )
        s.append("step/end", {"turn": turn, "step": 1})
        s.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return s


def publish(
    kafka: KafkaSettings,
    records: Iterable[tuple[str, Mapping[str, Any] | bytes]],
    per_transaction: int = 500,
) -> int:
    """Publish (session id, wire event or raw bytes) as the writer does; returns the count."""
    producer = Producer(
        {
            **kafka.client_config(),
            **PRODUCER_PARTITIONER,
            "transactional.id": f"test-{uuid.uuid4().hex}",
            "retry.backoff.ms": 5,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    topic = kafka.topic("events")
    count = 0
    producer.begin_transaction()
    for session_id, wire in records:
        value = wire if isinstance(wire, bytes) else encode(session_id, wire)
        event_type = "garbage/bytes" if isinstance(wire, bytes) else str(wire["type"])
        headers = list[tuple[str, str | bytes | None]](event_headers(event_type))
        producer.produce(topic, key=session_id.encode(), value=value, headers=headers)
        count += 1
        if count % per_transaction == 0:
            producer.commit_transaction(30)
            producer.begin_transaction()
    producer.commit_transaction(30)
    return count


def events_of(*sessions: dsh.Session) -> list[tuple[str, dict[str, Any]]]:
    return [(s.id, ev.to_json()) for s in sessions for ev in s.events()]


def interleave(*sessions: dsh.Session) -> list[tuple[str, dict[str, Any]]]:
    """Events of many sessions mixed as concurrent writers would produce them."""
    queues = [[(s.id, ev.to_json()) for ev in s.events()] for s in sessions]
    out = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def projector_env(kafka: KafkaSettings, redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env.update(
        DSH_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
        DSH_KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        DSH_REDIS_URL=redis_url,
        DSH_PROJECTOR_GROUP_PREFIX=f"g-{kafka.topic_prefix}",
        DSH_PROJECTOR_PROJECTIONS=f"image/offload={OFFLOAD}",
    )
    env.update(extra)
    return env


def start_projector_process(
    projection: str, kafka: KafkaSettings, redis_url: str, log_path: Path, **extra: str
) -> CliProcess:
    return CliProcess(["project", projection], projector_env(kafka, redis_url, **extra), log_path)


@contextmanager
def projectors_running(
    kafka: KafkaSettings,
    redis_url: str,
    names: Iterable[str] = ("surface", "transcript", "audit"),
    *,
    cluster: bool = False,
    **settings: Any,
) -> Iterator[dict[str, Any]]:
    """The projectors in threads of this process (fast); yields name → Runtime. ``cluster``:
    ``redis_url`` is a seed node of a Redis Cluster."""
    from cli.wiring import build_runtime
    from projectors.settings import ProjectorSettings
    from servicekit.interpreters import parse_interpreters as parse

    defaults: dict[str, Any] = {
        "group_prefix": f"g-{kafka.topic_prefix}",
        "projections": f"image/offload={OFFLOAD}",
        "poll_timeout_s": 0.05,
        "sentinel_interval_s": 0.3,
    }
    projector_settings = ProjectorSettings(**(defaults | settings))
    parse(projector_settings.projections)
    stop = threading.Event()
    runtimes = {
        name: build_runtime(
            name,
            kafka,
            RedisSettings(url=SecretStr(redis_url), cluster=cluster),
            projector_settings,
        )
        for name in names
    }
    threads = [
        threading.Thread(target=rt.run, args=(stop,), name=f"projector-{n}", daemon=True)
        for n, rt in runtimes.items()
    ]
    for t in threads:
        t.start()
    try:
        yield runtimes
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def caught_up(client: Any, last: Mapping[str, int], projections: Iterable[str]) -> bool:
    """Every projection applied each session up to its seq (one Redis or a cluster)."""
    from tests.support.read_models import applied

    return all(applied(client, p, sid) == want for sid, want in last.items() for p in projections)


def quiet_session_set_back(
    kafka: KafkaSettings,
    client: Any,
    redis_url: str,
    fault: Callable[[dict[str, Any]], AbstractContextManager[None]],
    cluster: bool = False,
) -> tuple[dsh.Session, int]:
    """A failover to a replica that missed a quiet session's last events, under running
    projectors. Every projection of the session is set back to a DUMP taken at an earlier seq
    M (RESTORE ... REPLACE, and DEL of a key that did not exist yet), then Redis fails for the
    projectors (``fault(runtimes)``, entered and left around the first of two waves of other
    sessions' events; the second is published once the first is applied). The quiet session
    gets nothing more. Returns it and M, after the second wave was applied."""
    projections = ("surface", "transcript", "audit")
    quiet = simple_session("quiet", turns=4)
    busy = [simple_session(f"busy-{i}", turns=4) for i in range(4)]
    events = events_of(quiet)
    earlier = len(events) // 2 - 1
    with projectors_running(kafka, redis_url, cluster=cluster) as runtimes:
        publish(kafka, events[: earlier + 1])
        wait_for(partial(caught_up, client, {quiet.id: earlier}, projections), what="seq M")
        keys = [k for rt in runtimes.values() for k in rt.projection.all_keys(quiet.id)]
        dumps = {key: client.dump(key) for key in keys}  # None: no such key at seq M
        publish(kafka, events[earlier + 1 :])
        last = {quiet.id: len(quiet) - 1}
        wait_for(partial(caught_up, client, last, projections), what="the quiet session")

        # The projectors' cache still holds the session at its last seq; nothing reads it.
        set_back(client, dumps)
        assert caught_up(client, {quiet.id: earlier}, projections), "not set back to seq M"
        half = len(busy[0]) // 2
        for number, wave in enumerate((slice(0, half), slice(half, None))):
            with fault(runtimes) if number == 0 else nullcontext():
                publish(kafka, [(s.id, e.to_json()) for s in busy for e in s.events()[wave]])
            last = {s.id: s.events()[wave][-1].seq for s in busy}
            wait_for(partial(caught_up, client, last, projections), what="the busy sessions")
    return quiet, earlier


def set_back(client: Any, dumps: Mapping[str, bytes | None]) -> None:
    """Each key back to its DUMP (RESTORE ... REPLACE), or deleted if it had none (None): what
    a failover to a replica that missed the writes since the DUMPs leaves."""
    for key, dumped in dumps.items():
        if dumped is None:
            client.delete(key)
        else:
            client.restore(key, 0, dumped, replace=True)


def group_lag(kafka: KafkaSettings, group: str, partitions: int) -> dict[int, int]:
    """End offset minus the group's committed offset, per partition that holds anything (as
    ``kafka-consumer-groups`` computes lag)."""
    topic = kafka.topic("events")
    probe = Consumer({**kafka.client_config(), "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        committed = {tp.partition: tp.offset for tp in probe.committed(tps, timeout=10)}
        lag = {}
        for p in range(partitions):
            _, end = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if end > 0:
                lag[p] = end - committed[p]
        return lag
    finally:
        probe.close()
