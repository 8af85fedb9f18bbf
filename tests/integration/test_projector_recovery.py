"""Recovery: a poison record blocks only its session; a projector SIGKILLed mid-batch resumes
without applying anything twice; Redis flushed under running projectors is rebuilt."""

from __future__ import annotations

import signal
import struct
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import REGISTRY
from pydantic import SecretStr

from cli.wiring import build_runtime
from deploy.local.processes import free_ports
from interpreters import offload_images
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.replay import replay
from projectors.settings import ProjectorSettings
from projectors.topic_reader import read_session
from projectors.verify import verify
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings, RedisSettings
from tests.conftest import TEST_PARTITIONS
from tests.integration.projector_support import (
    CLOCK_MS,
    OFFLOAD,
    events_of,
    interleave,
    projectors_running,
    publish,
    quiet_session_set_back,
    scripted_session,
    simple_session,
    start_projector_process,
)
from tests.support.builders import user
from tests.support.read_models import KEYS, applied
from tests.support.waiting import wait_for

PROJECTIONS = ("surface", "transcript", "audit")
INTERPRETERS = {"image/offload": offload_images}


def _caught_up(client: redis.Redis, last: dict[str, int], projections=PROJECTIONS) -> bool:
    pipe = client.pipeline(transaction=False)
    for sid in last:
        for projection in projections:
            pipe.hget(KEYS.meta(projection, sid), "applied")
    values = iter(pipe.execute())
    return all(int(next(values) or -1) == want for want in last.values() for _ in projections)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _dead_letters(kafka: KafkaSettings, expected: int) -> list[dict[str, str]]:
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": f"dlq-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
        }
    )
    topic = kafka.topic("dlq")
    consumer.assign([TopicPartition(topic, p, 0) for p in range(TEST_PARTITIONS)])
    out: list[dict[str, str]] = []
    deadline = time.monotonic() + 20
    while len(out) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        headers = {str(k): _text(v) for k, v in list(message.headers() or [])}
        out.append({"key": (message.key() or b"").decode(), **headers})
    consumer.close()
    return out


def test_a_poison_record_blocks_its_session_and_no_other(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    good = [simple_session(f"good-{i}", turns=3) for i in range(3)]
    codec = simple_session("poison-codec", turns=2)
    fingerprint = simple_session("poison-fingerprint", turns=2)
    rule = simple_session("poison-rule", turns=2)
    records: list[tuple[str, Any]] = list(interleave(*good))
    # Garbage, a record of a schema nobody knows, and an event the core refuses, each after
    # three good events of its session and followed by more.
    unknown_schema = b"\xc3\x01" + struct.pack("<Q", 0x1234_5678_9ABC_DEF0) + b"\x02\x04"
    bad_replace = {
        "type": "user/message",
        "seq": 3,
        "time": CLOCK_MS,
        "data": user("x", "rewrite history"),
        "surfaceOp": {"op": "replace", "startSeq": 0, "endSeq": 2},  # 0 is not a surface node
        "sourceEventSeqs": [0, 1, 2],
    }
    for session, poison in (
        (codec, b"definitely not avro"),
        (fingerprint, unknown_schema),
    ):
        events = events_of(session)
        records += [*events[:3], (session.id, poison), *events[3:]]
    rule_events = events_of(rule)
    records += [*rule_events[:3], (rule.id, bad_replace)]
    publish(topics, records)

    last = {s.id: len(s) - 1 for s in good}
    expected_codes = {
        codec.id: "CODEC_BAD_MARKER",
        fingerprint.id: "CODEC_UNKNOWN_FINGERPRINT",
        rule.id: "REPLACE_START_NOT_ON_SURFACE",
    }

    def dead_lettered(projection: str, code: str) -> float:
        labels = {"projector": projection, "code": code}
        return REGISTRY.get_sample_value("dsh_projector_dlq_total", labels) or 0.0

    codes = expected_codes.values()
    letters_before = {(p, c): dead_lettered(p, c) for p in PROJECTIONS for c in codes}
    with projectors_running(topics, servers.redis_url):
        wait_for(lambda: _caught_up(redis_client, last), what="the good sessions")
        blocked = {codec.id, fingerprint.id, rule.id}
        wait_for(
            lambda: all(
                redis_client.sismember(f"dsh:blocked:{p}", sid)
                for p in PROJECTIONS
                for sid in blocked
            ),
            what="the poisoned sessions to be blocked",
        )
        wait_for(
            lambda: all(
                REGISTRY.get_sample_value("dsh_projector_blocked_sessions", {"projector": p}) == 3
                for p in PROJECTIONS
            ),
            what="the blocked-sessions gauge of each projector at 3",
        )
    for (projection, code), before in letters_before.items():
        assert dead_lettered(projection, code) - before == 1, (projection, code)

    reader = Reader(redis_client, Keys())
    for session in good:
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)
    for sid, code in expected_codes.items():
        for projection in PROJECTIONS:
            reason = reader.blocked(projection, sid)
            assert reason is not None and reason["code"] == code, (projection, reason)
            assert applied(redis_client, projection, sid) == 2  # the three good events before
        report = verify(sid, read_session(topics, sid), reader, INTERPRETERS)
        assert report.ok and report.blocked_reason, report.differences
    letters = _dead_letters(topics, expected=9)
    assert sorted((d["key"], d["dsh-dlq-code"]) for d in letters) == sorted(
        (sid, code) for sid, code in expected_codes.items() for _ in PROJECTIONS
    )
    assert {d["dsh-dlq-service"] for d in letters} == {f"project-{p}" for p in PROJECTIONS}
    # The record's own headers travel with it.
    assert {d["dsh-type"] for d in letters if d["key"] == codec.id} == {"garbage/bytes"}
    assert {d["dsh-format"] for d in letters} == {"3"}


def test_a_missing_interpreter_blocks_the_surface_of_that_session_only(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    needs = scripted_session("needs-offload").session
    plain = simple_session("plain", turns=2)
    publish(topics, interleave(needs, plain))
    with projectors_running(topics, servers.redis_url, projections=""):
        wait_for(
            lambda: (
                _caught_up(
                    redis_client,
                    {plain.id: len(plain) - 1, needs.id: len(needs) - 1},
                    ("transcript", "audit"),
                )
                and _caught_up(redis_client, {plain.id: len(plain) - 1}, ("surface",))
                and bool(redis_client.sismember("dsh:blocked:surface", needs.id))
            ),
            what="plain fully projected, needs-offload blocked on its surface",
        )
    reader = Reader(redis_client, Keys())
    reason = reader.blocked("surface", needs.id)
    assert reason is not None and reason["code"] == "MISSING_INTERPRETER"
    assert "image/offload" in reason["message"]

    # Once the interpreter is configured, replaying the session unblocks it.
    settings = ProjectorSettings(projections=f"image/offload={OFFLOAD}")
    runtime = build_runtime(
        "surface", topics, RedisSettings(url=SecretStr(servers.redis_url)), settings
    )
    replay(topics, [runtime], [needs.id])
    assert reader.blocked("surface", needs.id) is None
    assert not redis_client.sismember("dsh:blocked:surface", needs.id)
    report = verify(needs.id, read_session(topics, needs.id), reader, INTERPRETERS)
    assert report.ok, "\n".join(report.differences)


def test_a_running_projector_applies_a_session_a_replay_unblocked(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    """The operations doc's order: the projector is restarted with the missing interpreter
    while the session is still blocked (it reads, and caches, the session as blocked), then
    `dsh replay` unblocks it. The running projector applies the session's later events rather
    than counting them as blocked for ever."""
    needs = scripted_session("unblocked-live").session
    publish(topics, events_of(needs))
    with projectors_running(topics, servers.redis_url, projections=""):
        wait_for(
            lambda: bool(redis_client.sismember("dsh:blocked:surface", needs.id)),
            what="the session blocked on its surface",
        )

    turn = 1 + max(e.data["turn"] for e in needs.events() if e.type == "turn/start")
    with projectors_running(topics, servers.redis_url) as runtimes:
        surface = runtimes["surface"]
        start = needs.append("turn/start", {"turn": turn})
        publish(topics, [(needs.id, start.to_json())])
        wait_for(
            lambda: surface.stats["blocked"] >= 1,
            what="the restarted projector to count the session's next event as blocked",
        )

        settings = ProjectorSettings(projections=f"image/offload={OFFLOAD}")
        replaying = build_runtime(
            "surface", topics, RedisSettings(url=SecretStr(servers.redis_url)), settings
        )
        replay(topics, [replaying], [needs.id])
        assert not redis_client.sismember("dsh:blocked:surface", needs.id)

        after = [
            needs.append("user/message", user("after", "after the replay"), "append"),
            needs.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}}),
        ]
        publish(topics, [(needs.id, ev.to_json()) for ev in after])
        wait_for(
            lambda: _caught_up(redis_client, {needs.id: after[-1].seq}),
            what="the events after the replay applied by the running projectors",
            explain=lambda: f"stats {dict(surface.stats)}",
        )
    reader = Reader(redis_client, Keys())
    assert reader.blocked("surface", needs.id) is None
    report = verify(needs.id, read_session(topics, needs.id), reader, INTERPRETERS)
    assert report.ok, "\n".join(report.differences)


def _scraped(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_sigkill_mid_batch_then_restart_applies_every_event_exactly_once(
    topics: KafkaSettings, redis_client: redis.Redis, servers, tmp_path: Path
) -> None:
    sessions = [simple_session(f"kill-{i}", turns=12) for i in range(60)]  # 60 x 72 events
    publish(topics, interleave(*sessions))
    last = {s.id: len(s) - 1 for s in sessions}
    total = sum(n + 1 for n in last.values())
    settings = {"DSH_PROJECTOR_BATCH_SIZE": "25", "DSH_PROJECTOR_INSTANCE_ID": "kill-test"}

    def progress(projection: str) -> int:
        pipe = redis_client.pipeline(transaction=False)
        for sid in last:
            pipe.hget(KEYS.meta(projection, sid), "applied")
        return sum(int(v) + 1 for v in pipe.execute() if v is not None)

    # One projector at a time, each killed an eighth of the way into its own events (it can get
    # a thousand events further before the kill lands): run together, a fast one could finish
    # first and leave its restart nothing to do.
    killed_at = {}
    for projection in PROJECTIONS:
        log = tmp_path / f"first-{projection}.log"
        process = start_projector_process(projection, topics, servers.redis_url, log, **settings)
        try:
            wait_for(
                lambda p=projection: progress(p) >= total // 8,  # type: ignore[misc]
                timeout_s=60,
                what=f"an eighth of the events in {projection}",
            )
        finally:
            process.kill()
        killed_at[projection] = progress(projection)
        assert killed_at[projection] < total, f"{projection} finished before the kill"

    ports = dict(zip(PROJECTIONS, free_ports(3), strict=True))
    second = [
        start_projector_process(
            p,
            topics,
            servers.redis_url,
            tmp_path / f"second-{p}.log",
            **settings,
            DSH_PROJECTOR_METRICS_PORT=str(ports[p]),
        )
        for p in PROJECTIONS
    ]
    try:
        wait_for(lambda: _caught_up(redis_client, last), timeout_s=60, what="the restart")
        for projection, port in ports.items():
            lag_0 = f'dsh_projector_lag{{partition="0",projector="{projection}"}} 0.0'
            wait_for(
                lambda port=port, lag_0=lag_0: lag_0 in _scraped(port),  # type: ignore[misc]
                timeout_s=15,
                what=f"{projection}'s lag gauge at 0 (set at its next housekeeping round)",
            )
            exposed = _scraped(port)
            series = {
                name: float(value)
                for name, _, value in (line.rpartition(" ") for line in exposed.splitlines())
                if name.startswith("dsh_projector_events_total{")
            }
            events = f'dsh_projector_events_total{{projector="{projection}",result='
            # What the kill left undone, and nothing poisonous: that series is there at 0.
            assert series[events + '"applied"}'] > 0
            assert series[events + '"poison"}'] == 0
            assert "dsh_projector_apply_seconds_bucket" in exposed
    finally:
        for process in second:
            process.signal(signal.SIGTERM)
        codes = [process.wait(30) for process in second]
        outputs = [process.log() for process in second]
    assert codes == [0, 0, 0], outputs
    print(killed_at, total, *(o.splitlines()[-1] for o in outputs), sep="\n")

    for sid, want in last.items():
        for projection in PROJECTIONS:
            applies = redis_client.hget(KEYS.meta(projection, sid), "applies")
            assert int(applies or 0) == want + 1, (sid, projection)  # never applied twice
        assert redis_client.xlen(KEYS.session(sid, "transcript")) == 12 * 2 + 12 * 2
    reader = Reader(redis_client, Keys())
    for session in sessions[:5]:
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)


def test_flushall_under_running_projectors_is_detected_and_rebuilt(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    sessions = [scripted_session(f"flush-{i}").session for i in range(4)]
    half = {s.id: len(s) // 2 for s in sessions}
    publish(topics, [(s.id, e.to_json()) for s in sessions for e in s.events()[: half[s.id]]])
    with projectors_running(topics, servers.redis_url) as runtimes:
        first_halves = {sid: h - 1 for sid, h in half.items()}
        wait_for(lambda: _caught_up(redis_client, first_halves), what="the first halves")
        redis_client.flushall()
        # The rest of two sessions arrives after the flush: those hit a gap; the other two are
        # found by the projectors' sentinel check.
        rest = [(s.id, e.to_json()) for s in sessions[:2] for e in s.events()[half[s.id] :]]
        publish(topics, rest)
        last = {**first_halves, **{s.id: len(s) - 1 for s in sessions[:2]}}
        wait_for(lambda: _caught_up(redis_client, last), what="the rebuild")
        lost = [rt.stats["redis_lost"] for rt in runtimes.values()]
    assert all(n >= 1 for n in lost), lost

    reader = Reader(redis_client, Keys())
    for session in sessions:
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)
    assert partition_for(sessions[0].id, TEST_PARTITIONS) in range(TEST_PARTITIONS)


def test_redis_connections_killed_under_load_still_apply_every_event_once(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    sessions = [simple_session(f"cut-{i}", turns=10) for i in range(20)]
    publish(topics, interleave(*sessions))
    last = {s.id: len(s) - 1 for s in sessions}
    with projectors_running(topics, servers.redis_url, batch_size=20) as runtimes:
        for _ in range(5):
            time.sleep(0.15)
            redis_client.client_kill_filter(_type="normal", skipme=True)
        wait_for(lambda: _caught_up(redis_client, last), timeout_s=60, what="catching up")
        stats = {name: dict(rt.stats) for name, rt in runtimes.items()}
    for sid, want in last.items():
        for projection in PROJECTIONS:
            applies = redis_client.hget(KEYS.meta(projection, sid), "applies")
            assert int(applies or 0) == want + 1, (sid, projection, stats)
    reader = Reader(redis_client, Keys())
    for session in sessions[:3]:
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)


def test_a_quiet_session_a_failover_set_back_is_rebuilt_without_another_event(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    """Redis replicates asynchronously: a failover to a replica that missed a session's last
    writes sets it back while its offsets stay committed. The projectors mend it once Redis
    answers again, though the session receives nothing more."""

    def rebuilt(projection: str) -> float:
        labels = {"projector": projection, "cause": "redis-failover"}
        return REGISTRY.get_sample_value("dsh_projector_rebuilds_total", labels) or 0.0

    before = {p: rebuilt(p) for p in PROJECTIONS}

    @contextmanager
    def connections_killed(runtimes: dict[str, Any]) -> Iterator[None]:
        redis_client.client_kill_filter(_type="normal", skipme=True)
        yield

    quiet, earlier = quiet_session_set_back(
        topics, redis_client, servers.redis_url, connections_killed
    )
    for projection in PROJECTIONS:
        assert applied(redis_client, projection, quiet.id) == len(quiet) - 1, (projection, earlier)
        assert rebuilt(projection) == before[projection] + 1, projection
    report = verify(
        quiet.id, read_session(topics, quiet.id), Reader(redis_client, Keys()), INTERPRETERS
    )
    assert report.ok, "\n".join(report.differences)


def test_redis_lost_while_the_projectors_were_down_is_rebuilt_at_start(
    topics: KafkaSettings, redis_client: redis.Redis, servers
) -> None:
    sessions = [simple_session(f"down-{i}", turns=2) for i in range(6)]
    publish(topics, interleave(*sessions))
    last = {s.id: len(s) - 1 for s in sessions}
    with projectors_running(topics, servers.redis_url):
        wait_for(lambda: _caught_up(redis_client, last), what="the first run")
    redis_client.flushall()  # offsets stay committed in Kafka; Redis has nothing
    with projectors_running(topics, servers.redis_url):
        wait_for(lambda: _caught_up(redis_client, last), what="the rebuild at start")
    reader = Reader(redis_client, Keys())
    for session in sessions[:2]:
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)


def _group_members(kafka: KafkaSettings, group: str) -> list[Any]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    description = admin.describe_consumer_groups([group])[group].result(10)
    return list(description.members)


def test_a_projector_restarted_after_sigkill_takes_its_partitions_back_at_once(
    topics: KafkaSettings, servers, tmp_path: Path
) -> None:
    """Static membership (``DSH_PROJECTOR_INSTANCE_ID``, the service name in the compose
    file): a projector killed and started again replaces its dead predecessor in the
    group at once, with the same assignment, instead of waiting for the dead member's session
    to expire. Seen in the group itself: one member, the new one, holding every partition, while
    the old session (a minute) has long to run."""
    group = f"g-{topics.topic_prefix}-surface"
    settings = {
        "DSH_PROJECTOR_INSTANCE_ID": "surface-0",
        "DSH_PROJECTOR_SESSION_TIMEOUT_MS": "60000",
    }

    def members() -> list[tuple[str, str | None, list[int]]]:
        return [
            (
                m.member_id,
                m.group_instance_id,
                sorted(tp.partition for tp in m.assignment.topic_partitions),
            )
            for m in _group_members(topics, group)
        ]

    every = list(range(TEST_PARTITIONS))
    first = start_projector_process(
        "surface", topics, servers.redis_url, tmp_path / "a.log", **settings
    )
    try:
        wait_for(
            lambda: [m[2] for m in members()] == [every],
            60,
            "the first owning every partition",
            explain=lambda: f"{members()}\n{first.log()[-1500:]}",
        )
        ((dead_member, instance, _),) = members()
        assert instance is not None and instance.startswith("surface-0")
    finally:
        first.kill()
    killed = time.monotonic()
    second = start_projector_process(
        "surface", topics, servers.redis_url, tmp_path / "b.log", **settings
    )
    try:
        wait_for(
            lambda: (
                second.owned() == every
                and [m[1:] for m in members()] == [(instance, every)]
                and members()[0][0] != dead_member
            ),
            40,  # the dead member's session has 60 s: not waited out
            "the restarted projector replacing its predecessor",
        )
        assert time.monotonic() - killed < 60
    finally:
        second.signal(signal.SIGTERM)
        second.wait(30)
