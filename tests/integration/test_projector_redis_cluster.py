"""The projectors on a Redis Cluster of 3 primaries (``DSH_REDIS_CLUSTER=true``): the batch
seam splits by slot and keeps the order, follows ASK and MOVED; the read models match the core;
a FLUSHALL of one primary, a primary lost while no projector ran, and a session's slot moved
to another primary under running projectors are all survived."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from interpreters import offload_images
from projectors.batch_io import ClusterLink, batch_io, execute
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.topic_reader import read_session
from projectors.verify import verify
from servicekit.settings import KafkaSettings
from tests.conftest import ClusterServers
from tests.integration.projector_support import (
    CLOCK_MS,
    caught_up,
    events_of,
    interleave,
    projector_env,
    projectors_running,
    publish,
    quiet_session_set_back,
    scripted_session,
    simple_session,
)
from tests.support.builders import user
from tests.support.read_models import KEYS, applied
from tests.support.waiting import wait_for

PROJECTIONS = ("surface", "transcript", "audit")
INTERPRETERS = {"image/offload": offload_images}


def _verify_all(client: redis.RedisCluster, kafka: KafkaSettings, session_ids: Any) -> None:
    reader = Reader(client, Keys())
    for sid in session_ids:
        report = verify(sid, read_session(kafka, sid), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)


def _owner_port(servers: ClusterServers, slot: int) -> int:
    """The port of the primary serving ``slot``, from a fresh view of the slot map."""
    with redis.RedisCluster.from_url(servers.url) as fresh:
        return int(fresh.nodes_manager.get_node_from_slot(slot).port)


def _session_slot(sid: str) -> int:
    return key_slot(KEYS.meta("surface", sid).encode())


def _migrate_slot(servers: ClusterServers, slot: int, *, finish: bool = True) -> int:
    """Move ``slot`` and its keys to another primary, as ``redis-cli --cluster reshard`` does;
    ``finish=False`` leaves it half way (MIGRATING / IMPORTING, every key moved). Returns the
    new owner's port."""
    source_port = _owner_port(servers, slot)
    target_port = next(p for p in servers.ports if p != source_port)
    nodes = {p: redis.Redis(port=p) for p in servers.ports}
    ids = {p: c.execute_command("CLUSTER MYID") for p, c in nodes.items()}
    source, target = nodes[source_port], nodes[target_port]
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[source_port])
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[target_port])
    while keys := source.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
        source.execute_command("MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "KEYS", *keys)
    if finish:
        for client in (target, source, *nodes.values()):
            client.execute_command("CLUSTER SETSLOT", slot, "NODE", ids[target_port])
    for client in nodes.values():
        client.close()
    return target_port


@pytest.mark.parametrize("backend", ["one Redis", "cluster"])
def test_the_batch_seam_keeps_order_and_errors_as_values(
    backend: str, request: pytest.FixtureRequest
) -> None:
    client = request.getfixturevalue("redis_client" if backend == "one Redis" else "redis_cluster")
    commands: list[tuple[Any, ...]] = [("SET", f"k{i}", i) for i in range(40)]
    commands += [
        ("MULTI",),
        ("SET", "{t}a", "1"),
        ("INCR", "{t}a"),
        ("EXEC",),
        ("INCR", "k1"),
        ("HSET", "k2", "f", "v"),  # WRONGTYPE: an error in its place, the rest still runs
        *[("GET", f"k{i}") for i in range(40)],
    ]
    pending = batch_io(client).submit(commands)
    replies = pending.result()
    assert replies[:40] == [b"OK"] * 40
    assert replies[40:44] == [b"OK", b"QUEUED", b"QUEUED", [b"OK", 2]]
    assert replies[44] == 2
    assert isinstance(replies[45], redis.ResponseError)
    assert replies[46:] == [str(2 if i == 1 else i).encode() for i in range(40)]
    if backend == "cluster":
        slots = {key_slot(f"k{i}".encode()) for i in range(40)}
        assert len({client.nodes_manager.get_node_from_slot(s).name for s in slots}) == 3


def test_the_cluster_seam_follows_ask_then_moved(
    redis_cluster: redis.RedisCluster, redis_cluster_servers: ClusterServers
) -> None:
    io = batch_io(redis_cluster)
    execute(io, [("SET", "{m}a", "1")])
    slot = key_slot(b"{m}a")
    before = redis_cluster.nodes_manager.get_node_from_slot(slot).port
    # Half way: the key is on the importing node, the slot still the old node's: ASK.
    target = _migrate_slot(redis_cluster_servers, slot, finish=False)
    assert execute(io, [("GET", "{m}a"), ("SET", "{m}b", "2"), ("GET", "k")]) == [
        b"1",
        b"OK",
        None,
    ]
    assert redis_cluster.nodes_manager.get_node_from_slot(slot).port == before  # ASK: no update
    # Finished: the old owner answers MOVED; the client's slot map follows.
    for port in redis_cluster_servers.ports:
        with redis.Redis(port=port) as node:
            node.execute_command("CLUSTER SETSLOT", slot, "NODE", _node_id(target))
    assert execute(io, [("MULTI",), ("INCR", "{m}a"), ("EXEC",), ("GET", "{m}b")]) == [
        b"OK",
        b"QUEUED",
        [2],
        b"2",
    ]
    assert redis_cluster.nodes_manager.get_node_from_slot(slot).port == target


def test_what_ran_after_a_missing_script_on_its_node_is_sent_again_behind_it(
    redis_cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another projector loads the scripts between this batch's first refusal and its next
    # command: that command ran ahead of the refused one, so it must run again after it.
    set_key = "redis.call('SET', KEYS[1], ARGV[1]) return 1"
    sha = redis_cluster.script_load(set_key)
    redis_cluster.script_flush()
    monkeypatch.setattr(
        "projectors.batch_io.cluster.load_all", lambda node: node.script_load(set_key)
    )
    link = batch_io(redis_cluster)
    assert isinstance(link, ClusterLink)
    replies = execute(link, [("EVALSHA", sha, 1, "{o}k", "first"), ("SET", "{o}k", "second")])
    assert replies == [1, b"OK"]
    assert redis_cluster.get("{o}k") == b"second"
    assert link.io.resent["NoScriptError"] == 2


def _node_id(port: int) -> Any:
    with redis.Redis(port=port) as node:
        return node.execute_command("CLUSTER MYID")


def test_projectors_on_a_cluster_match_the_core(
    topics: KafkaSettings,
    redis_cluster: redis.RedisCluster,
    redis_cluster_servers: ClusterServers,
) -> None:
    sessions = [scripted_session(f"rc-{i}").session for i in range(6)]
    ports = {_owner_port(redis_cluster_servers, _session_slot(s.id)) for s in sessions}
    assert len(ports) >= 2, "the sessions should spread over primaries"
    half = {s.id: len(s) // 2 for s in sessions}
    publish(topics, [(s.id, e.to_json()) for s in sessions for e in s.events()[: half[s.id]]])
    with projectors_running(topics, redis_cluster_servers.url, cluster=True) as runtimes:
        wait_for(
            lambda: caught_up(redis_cluster, {sid: h - 1 for sid, h in half.items()}, PROJECTIONS),
            what="the first halves",
        )
        # Every primary forgets the scripts: the seam loads them again where refused.
        redis_cluster.script_flush()
        publish(topics, [(s.id, e.to_json()) for s in sessions for e in s.events()[half[s.id] :]])
        last = {s.id: len(s) - 1 for s in sessions}
        wait_for(lambda: caught_up(redis_cluster, last, PROJECTIONS), what="the second halves")
        stats = {name: dict(rt.stats) for name, rt in runtimes.items()}
        resent = {name: dict(rt.link.io.resent) for name, rt in runtimes.items()}
    # The scripts are shared by the projections: whichever meets NOSCRIPT on a primary first
    # loads them there for all, so only the sum is certain.
    assert sum(r.get("NoScriptError", 0) for r in resent.values()) >= 1, resent
    for name, s in stats.items():
        assert s.get("gap", 0) == 0 and s.get("rebuilt", 0) == 0, (name, s)
    for sid, want in last.items():
        for projection in PROJECTIONS:
            applies = redis_cluster.hget(KEYS.meta(projection, sid), "applies")
            assert int(applies or 0) == want + 1, (sid, projection)
    _verify_all(redis_cluster, topics, last)


def test_a_flushall_of_one_primary_is_detected_and_rebuilt(
    topics: KafkaSettings,
    redis_cluster: redis.RedisCluster,
    redis_cluster_servers: ClusterServers,
) -> None:
    sessions = [simple_session(f"rc-flush-{i}", turns=3) for i in range(8)]
    publish(topics, interleave(*sessions))
    last = {s.id: len(s) - 1 for s in sessions}
    owner = {s.id: _owner_port(redis_cluster_servers, _session_slot(s.id)) for s in sessions}
    with projectors_running(topics, redis_cluster_servers.url, cluster=True) as runtimes:
        wait_for(lambda: caught_up(redis_cluster, last, PROJECTIONS), what="the first run")
        # One primary loses everything; no event follows, so no gap can reveal it: only the
        # sentinels on every primary do.
        # Not the primary of the first tag (``{n0}``): every primary has a sentinel.
        first = _owner_port(redis_cluster_servers, key_slot(b"n0"))
        victim = min(set(owner.values()) - {first})
        with redis.Redis(port=victim) as node:
            node.flushall()
        # (Not asserted behind here: the sentinels may see the flush and rebuild first.)
        wait_for(lambda: caught_up(redis_cluster, last, PROJECTIONS), what="the rebuild")
        lost = [rt.stats["redis_lost"] for rt in runtimes.values()]
    assert all(n >= 1 for n in lost), lost
    _verify_all(redis_cluster, topics, last)


def test_one_primary_lost_while_the_projectors_were_down_is_rebuilt_at_start(
    topics: KafkaSettings,
    redis_cluster: redis.RedisCluster,
    redis_cluster_servers: ClusterServers,
) -> None:
    sessions = [simple_session(f"rc-down-{i}", turns=2) for i in range(8)]
    publish(topics, interleave(*sessions))
    last = {s.id: len(s) - 1 for s in sessions}
    with projectors_running(topics, redis_cluster_servers.url, cluster=True):
        wait_for(lambda: caught_up(redis_cluster, last, PROJECTIONS), what="the first run")
    # Not the primary of the one marks key a single Redis would have: every primary has marks.
    single = _owner_port(redis_cluster_servers, key_slot(b"dsh:projection:surface:initialized"))
    owners = {_owner_port(redis_cluster_servers, _session_slot(s.id)) for s in sessions}
    victim = min(owners - {single})
    with redis.Redis(port=victim) as node:
        node.flushall()  # offsets stay committed in Kafka; that primary has nothing
    with projectors_running(topics, redis_cluster_servers.url, cluster=True):
        wait_for(lambda: caught_up(redis_cluster, last, PROJECTIONS), what="the rebuild at start")
    _verify_all(redis_cluster, topics, [s.id for s in sessions[:3]])


def test_a_session_slot_moved_under_running_projectors(
    topics: KafkaSettings,
    redis_cluster: redis.RedisCluster,
    redis_cluster_servers: ClusterServers,
) -> None:
    moving, staying = scripted_session("rc-move").session, simple_session("rc-stay", turns=4)
    events = {s.id: events_of(s) for s in (moving, staying)}
    half = {sid: len(evs) // 2 for sid, evs in events.items()}
    publish(topics, [e for sid, evs in events.items() for e in evs[: half[sid]]])
    with projectors_running(topics, redis_cluster_servers.url, cluster=True) as runtimes:
        first = {sid: h - 1 for sid, h in half.items()}
        wait_for(lambda: caught_up(redis_cluster, first, PROJECTIONS), what="the first halves")
        slot = _session_slot(moving.id)
        before = _owner_port(redis_cluster_servers, slot)
        after = _migrate_slot(redis_cluster_servers, slot)
        assert after != before
        # The projectors' slot maps still name the old owner: its MOVED is followed.
        publish(topics, [e for sid, evs in events.items() for e in evs[half[sid] :]])
        last = {sid: len(evs) - 1 for sid, evs in events.items()}
        wait_for(lambda: caught_up(redis_cluster, last, PROJECTIONS), what="the second halves")
        stats = {name: dict(rt.stats) for name, rt in runtimes.items()}
        resent = {name: dict(rt.link.io.resent) for name, rt in runtimes.items()}
        owners = {
            n: rt.redis.nodes_manager.get_node_from_slot(slot).port for n, rt in runtimes.items()
        }
    assert all(r.get("MovedError", 0) >= 1 for r in resent.values()), resent
    assert set(owners.values()) == {after}, owners
    for name, s in stats.items():
        assert s.get("rebuilt", 0) == 0 and s.get("redis_lost", 0) == 0, (name, s)
    _verify_all(redis_cluster, topics, last)


def test_a_primary_down_then_back_empty_fails_batches_then_rebuilds(
    topics: KafkaSettings,
    redis_cluster: redis.RedisCluster,
    redis_cluster_servers: ClusterServers,
) -> None:
    sessions = [simple_session(f"rc-crash-{i}", turns=4) for i in range(8)]
    events = {s.id: events_of(s) for s in sessions}
    half = {sid: len(evs) // 2 for sid, evs in events.items()}
    owner = {s.id: _owner_port(redis_cluster_servers, _session_slot(s.id)) for s in sessions}
    victim_port = max(set(owner.values()), key=list(owner.values()).count)
    (victim,) = [n for n in redis_cluster_servers.local.nodes if n.port == victim_port]
    publish(topics, [e for sid, evs in events.items() for e in evs[: half[sid]]])
    with projectors_running(topics, redis_cluster_servers.url, cluster=True) as runtimes:
        first = {sid: h - 1 for sid, h in half.items()}
        wait_for(lambda: caught_up(redis_cluster, first, PROJECTIONS), what="the first halves")
        # A primary dies (no replica takes over); batches fail whole and are not committed.
        victim.stop()
        # One session of that primary gets no more events: only the sentinels can tell that
        # it must be rebuilt; the others hit a gap too.
        idle = next(sid for sid in events if owner[sid] == victim_port)
        publish(topics, [e for sid, evs in events.items() if sid != idle for e in evs[half[sid] :]])
        wait_for(lambda: any(rt.link.io.stale for rt in runtimes.values()), what="a batch to fail")
        # It comes back empty, with its slots: the sentinels notice, the partitions replay.
        victim.start()
        redis_cluster_servers.local.wait_ready()
        last = {sid: len(evs) - 1 for sid, evs in events.items()}
        last[idle] = half[idle] - 1
        wait_for(
            lambda: caught_up(redis_cluster, last, PROJECTIONS), timeout_s=90, what="the rebuild"
        )
        lost = {name: rt.stats["redis_lost"] for name, rt in runtimes.items()}
    assert all(n >= 1 for n in lost.values()), lost
    for sid, want in last.items():
        for projection in PROJECTIONS:
            applies = redis_cluster.hget(KEYS.meta(projection, sid), "applies")
            assert int(applies or 0) == want + 1, (sid, projection, owner[sid] == victim_port)
    _verify_all(redis_cluster, topics, last)


def test_a_quiet_session_a_failover_set_back_is_rebuilt_on_a_cluster(
    topics: KafkaSettings,
    redis_cluster: redis.RedisCluster,
    redis_cluster_servers: ClusterServers,
) -> None:
    """As on one Redis (test_projector_recovery): the quiet session's slot set back, then
    every primary refusing writes (too few replicas) until each projector had a batch refused."""
    primaries = [redis.Redis(port=port) for port in redis_cluster_servers.ports]

    @contextmanager
    def writes_refused(runtimes: dict[str, Any]) -> Iterator[None]:
        for node in primaries:
            node.config_set("min-replicas-to-write", 1)
        try:
            yield
            wait_for(
                lambda: all(rt.loop.writes_failing for rt in runtimes.values()),
                what="a batch refused in every projector",
            )
        finally:
            for node in primaries:
                node.config_set("min-replicas-to-write", 0)

    try:
        quiet, earlier = quiet_session_set_back(
            topics, redis_cluster, redis_cluster_servers.url, writes_refused, cluster=True
        )
    finally:
        for node in primaries:
            node.close()
    for projection in PROJECTIONS:
        assert applied(redis_cluster, projection, quiet.id) == len(quiet) - 1, earlier
    _verify_all(redis_cluster, topics, [quiet.id])


def test_dsh_replay_and_verify_on_a_cluster_with_a_blocked_session(
    topics: KafkaSettings,
    redis_cluster: redis.RedisCluster,
    redis_cluster_servers: ClusterServers,
) -> None:
    good = [scripted_session(f"rc-replay-{i}").session for i in range(4)]
    bad = simple_session("rc-replay-bad", turns=2)
    refused = {
        "type": "user/message",
        "seq": 3,
        "time": CLOCK_MS,
        "data": user("x", "rewrite history"),
        "surfaceOp": {"op": "replace", "startSeq": 0, "endSeq": 2},  # 0 is not a surface node
        "sourceEventSeqs": [0, 1, 2],
    }
    publish(topics, [*interleave(*good), *events_of(bad)[:3], (bad.id, refused)])
    env = projector_env(topics, redis_cluster_servers.url, DSH_REDIS_CLUSTER="true")

    def dsh_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = dsh_cli("replay")
    assert done.returncode == 0, done.stderr
    # Each session rebuilt in a MULTI on its own primary; the blocked set (another slot)
    # updated around it.
    assert redis_cluster.smembers("dsh:blocked:surface") == {bad.id.encode()}
    for session in [*good, bad]:
        checked = dsh_cli("verify", session.id, "--json")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert json.loads(checked.stdout)["ok"] is True
