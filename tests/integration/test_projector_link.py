"""The projectors' two-phase Redis link: batches submitted back to back are executed in order,
their replies read in any order, a failed command is a value, a broken link fails them all."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from redis._parsers import _HiredisParser, _RESP2Parser

from deploy.local.redis_server import RedisServer
from interpreters import offload_images
from projectors.keys import Keys
from projectors.link import RedisLink, WritesRefusedError, raise_errors
from projectors.read_api import Reader
from projectors.topic_reader import read_session
from projectors.verify import verify
from projectors.views import Views
from servicekit.health import failing
from servicekit.settings import KafkaSettings
from tests.integration.projector_support import (
    events_of,
    projector_env,
    projectors_running,
    publish,
    simple_session,
)
from tests.support.processes import free_port_run, run_dsh
from tests.support.read_models import applied
from tests.support.waiting import wait_for


def test_batches_in_flight_are_executed_in_order_and_read_in_any_order(
    redis_client: redis.Redis,
) -> None:
    link = RedisLink(redis_client)
    first = link.submit([("RPUSH", "l", "a"), ("LRANGE", "l", 0, -1)])
    second = link.submit([("RPUSH", "l", "b"), ("HSET", "l", "f", "v"), ("LLEN", "l")])
    third = link.submit([("LRANGE", "l", 0, -1)])
    assert not first.done and not second.done
    # Reading the second reads (and keeps) the first's replies on the way.
    reply, error, length = second.result()
    assert first.done and not third.done
    assert (reply, length) == (2, 2)
    assert isinstance(error, redis.ResponseError) and "WRONGTYPE" in str(error)
    assert first.result() == [1, [b"a"]]
    assert third.result() == [[b"a", b"b"]]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        raise_errors(second.result())
    assert link.submit([]).result() == []
    link.close()


def test_a_reset_fails_every_unread_batch_and_the_link_reconnects(
    redis_client: redis.Redis,
) -> None:
    link = RedisLink(redis_client)
    lost = link.submit([("SET", "k", "1")])
    link.reset()
    with pytest.raises(redis.ConnectionError):
        lost.result()
    assert link.round_trip([("INCR", "n"), ("INCR", "n")]) == [1, 2]
    link.close()


def test_a_connection_killed_under_batches_in_flight_fails_them_all(
    redis_client: redis.Redis,
) -> None:
    link = RedisLink(redis_client)
    link.round_trip([("PING",)])
    redis_client.client_kill_filter(_type="normal", skipme=True)
    submitted = []
    with pytest.raises(redis.ConnectionError):  # on a write, or at the latest on reading
        submitted.append(link.submit([("INCR", "n")]))
        submitted.append(link.submit([("INCR", "n")]))
        submitted[-1].result()
    for pending in submitted:
        with pytest.raises(redis.ConnectionError):
            pending.result()
    assert link.round_trip([("INCR", "n")]) == [1]  # a new connection; nothing ran before
    link.close()


@pytest.fixture
def primary_and_replica(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    from deploy.local.processes import free_ports

    first, second = free_ports(2)
    servers = (
        RedisServer(tmp_path / "a", first, persistent=False),
        RedisServer(tmp_path / "b", second, persistent=False, replica_of=first),
    )
    try:
        for server in servers:
            server.start()
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize("parser", [_HiredisParser, _RESP2Parser])
def test_a_write_refused_by_a_demoted_primary_fails_the_batch_as_a_lost_connection(
    primary_and_replica: tuple[RedisServer, RedisServer], parser: type
) -> None:
    """A failover behind one address (a managed Redis's DNS name, a proxy) leaves the link's
    connection on the old primary, now a replica, which refuses every write with READONLY. That
    is a lost primary, not a failed command: the batch fails as on a broken connection (which
    the projectors retry on a new one) instead of being read as the commands' replies."""
    primary, replica = primary_and_replica
    pool = redis.ConnectionPool(port=primary.port, parser_class=parser)
    link = RedisLink(redis.Redis(connection_pool=pool))
    assert link.round_trip([("SET", "before", "1")]) == [b"OK"]
    with redis.Redis(port=replica.port) as promoted, redis.Redis(port=primary.port) as demoted:
        promoted.replicaof("NO", "ONE")
        demoted.replicaof("127.0.0.1", replica.port)
        wait_for(lambda: demoted.role()[0] == b"slave", 30, "the old primary demoted")

    script = "return redis.call('INCR', KEYS[1])"
    for batch in ([("EVAL", script, 1, "n")], [("GET", "before"), ("INCR", "n")]):
        with pytest.raises(redis.ConnectionError, match="READONLY"):
            link.round_trip(batch)
    link.close()


# What Redis before 7 answers when a script writes on a replica: the refusal wrapped in the
# script's failure (the Redis 7 server under test sends the same reply from error_reply).
_WRAPPED = (
    "ERR Error running script (call to f_5fd2): @user_script:1: @user_script: 1: "
    "-READONLY You can't write against a read only replica."
)


@pytest.mark.parametrize("parser", [_HiredisParser, _RESP2Parser])
def test_a_script_refused_by_a_replica_before_redis_7_is_a_lost_connection_too(
    redis_client: redis.Redis, parser: type
) -> None:
    port = redis_client.connection_pool.connection_kwargs["port"]
    link = RedisLink(
        redis.Redis(connection_pool=redis.ConnectionPool(port=port, parser_class=parser))
    )
    with pytest.raises(redis.ConnectionError, match="READONLY"):
        link.round_trip([("EVAL", f"return redis.error_reply({_WRAPPED!r})", 0)])
    # A script's own error that only mentions the word stays that command's reply.
    mention = "ERR session -READONLY x is not writable"
    (reply,) = link.round_trip([("EVAL", f"return redis.error_reply({mention!r})", 0)])
    assert isinstance(reply, redis.ResponseError) and "-READONLY x" in str(reply)
    link.close()


# Writes Redis refuses for a state of its own, as Redis 7 answers them (the refusal's code
# first, also from inside a script) and as Redis before 7 wraps them in a script's failure.
_REFUSALS = [
    "OOM command not allowed when used memory > 'maxmemory'.",
    "OOM command not allowed when used memory > 'maxmemory'. script: 5fd2, on @user_script:1.",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist",
    "NOREPLICAS Not enough good replicas to write.",
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    "NOPERM this user has no permissions to run the 'set' command",
    *(
        f"ERR Error running script (call to f_5fd2): @user_script:1: @user_script: 1: -{r}"
        for r in (
            "OOM command not allowed when used memory > 'maxmemory'.",
            "MISCONF Errors writing to the AOF file: No space left on device",
            "NOREPLICAS Not enough good replicas to write.",
        )
    ),
]


@pytest.mark.parametrize("parser", [_HiredisParser, _RESP2Parser])
@pytest.mark.parametrize("refusal", _REFUSALS)
def test_a_write_redis_refuses_for_its_own_state_fails_the_batch_not_the_command(
    redis_client: redis.Redis, parser: type, refusal: str
) -> None:
    """Such a refusal says nothing about the session (read as its command's reply, it was a
    gap, and the rebuild was refused too): the whole batch fails, to be sent again."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    link = RedisLink(
        redis.Redis(connection_pool=redis.ConnectionPool(port=port, parser_class=parser))
    )
    with pytest.raises(WritesRefusedError, match=refusal.split()[-1]) as refused:
        link.round_trip([("INCR", "n"), ("EVAL", f"return redis.error_reply({refusal!r})", 0)])
    assert refused.value.code in refusal
    # A script's own error that merely names a code stays its command's reply.
    mention = "ERR session -OOM x is BUSY"
    (reply,) = link.round_trip([("EVAL", f"return redis.error_reply({mention!r})", 0)])
    assert isinstance(reply, redis.ResponseError) and not isinstance(reply, WritesRefusedError)
    link.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own: it is made to refuse writes."""
    from deploy.local.processes import free_ports

    (port,) = free_ports(1)
    server = RedisServer(tmp_path / "own", port, persistent=False)
    try:
        server.start()
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _ready(rt: Any) -> bool:
    return bool(rt.health.readiness()[0] == 200)


def _applied_all(node: redis.Redis, projection: str, session: Any) -> bool:
    return applied(node, projection, session.id) == len(session) - 1


def test_a_projector_whose_redis_is_out_of_memory_waits_for_it_and_rebuilds_nothing(
    topics: KafkaSettings, own_redis: RedisServer
) -> None:
    """Redis at maxmemory (noeviction) refuses every write with OOM while PING still answers.
    The projectors retry their batch, not ready and saying why, and neither rebuild a session
    (it lost nothing) nor exit; once memory is freed they catch up, and the read models match
    the core's."""
    first, second, third = (
        simple_session(f"oom-{uuid.uuid4().hex[:6]}-{n}", turns=2) for n in (1, 2, 3)
    )
    half = len(events_of(second)) // 2
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    with (
        projectors_running(topics, url) as runtimes,
        redis.Redis(port=own_redis.port) as node,
    ):
        views = Views(node, timeout_s=30)
        publish(topics, [*events_of(first), *events_of(second)[:half]])
        views.surface(second.id, at_least=half - 1)
        for rt in runtimes.values():
            wait_for(partial(_ready, rt), 30, "ready")
        node.config_set("maxmemory-policy", "noeviction")
        node.config_set("maxmemory", 1)
        publish(topics, [*events_of(second)[half:], *events_of(third)])

        for name, rt in runtimes.items():

            def refused(rt: Any = rt) -> bool:
                return "(OOM)" in failing(rt.health.readiness()[1]).get("redis", "")

            wait_for(refused, 30, f"{name}'s readiness to name the refused writes")
            assert failing(rt.health.readiness()[1])["redis"].startswith("[REDIS_WRITES_FAILING]")
        time.sleep(1)  # retries meanwhile: none may rebuild, nor end a projector
        alive = {t.name for t in threading.enumerate()}
        for name, rt in runtimes.items():
            assert f"projector-{name}" in alive
            assert rt.stats["rebuilt"] == 0 and rt.stats["gap"] == 0, (name, rt.stats)
        node.config_set("maxmemory", 0)
        for rt in runtimes.values():
            wait_for(partial(_ready, rt), 30, "ready once its writes go through")
        views.surface(third.id, at_least=len(third) - 1)
        views.surface(second.id, at_least=len(second) - 1)
        for name, rt in runtimes.items():
            assert rt.stats["rebuilt"] == 0 and rt.stats["gap"] == 0, (name, rt.stats)
        reader = Reader(node, Keys())
        for session in (first, second, third):
            for name in runtimes:  # each projector has applied the session's last seq
                done = partial(_applied_all, node, name, session)
                wait_for(done, 30, f"{name} to apply {session.id}")
            log = read_session(topics, session.id)
            report = verify(session.id, log, reader, {"image/offload": offload_images})
            assert report.ok, "\n".join(report.differences)


def test_a_projector_whose_writes_a_replica_refuses_is_not_ready_until_they_succeed(
    topics: KafkaSettings, primary_and_replica: tuple[RedisServer, RedisServer]
) -> None:
    """The node DSH_REDIS_URL names is demoted to a replica and stays one (no Sentinel, no
    address that follows the primary): it answers PING, so only the refused writes show it.
    Readiness says so, and why, while the projector retries, and is back once the writes go
    through (here: the node promoted again), with nothing of the session lost."""
    primary, replica = primary_and_replica
    first, second = (simple_session(f"ro-{uuid.uuid4().hex[:6]}-{n}", turns=2) for n in (1, 2))
    with (
        projectors_running(topics, f"redis://127.0.0.1:{primary.port}/0", names=["surface"]) as rt,
        redis.Redis(port=primary.port) as node,
        redis.Redis(port=replica.port) as other,
    ):
        health, views = rt["surface"].health, Views(node, timeout_s=30)
        publish(topics, events_of(first))
        views.surface(first.id, at_least=len(first) - 1)
        wait_for(lambda: health.readiness()[0] == 200, 30, "ready on the primary")
        other.replicaof("NO", "ONE")
        node.replicaof("127.0.0.1", replica.port)
        wait_for(lambda: node.role()[0] == b"slave", 30, "the node demoted")
        publish(topics, events_of(second))

        def refused() -> bool:
            return "READONLY" in failing(health.readiness()[1]).get("redis", "")

        wait_for(refused, 30, "readiness to name the refused writes")
        status, body = health.readiness()
        assert status == 503 and body["checks"]["redis"].startswith("[REDIS_WRITES_FAILING]")
        node.replicaof("NO", "ONE")
        wait_for(lambda: health.readiness()[0] == 200, 30, "ready once its writes go through")
        view = views.surface(second.id, at_least=len(second) - 1)
        assert view.messages == list(second.derive_messages())


def test_a_projector_started_against_a_replica_names_it_and_exits(
    topics: KafkaSettings, primary_and_replica: tuple[RedisServer, RedisServer]
) -> None:
    _, replica = primary_and_replica
    env = projector_env(topics, f"redis://127.0.0.1:{replica.port}/0")
    env["DSH_PROJECTOR_METRICS_PORT"] = str(free_port_run(1))
    done = run_dsh(env, "project", "surface", timeout=60)
    assert done.returncode == 1, done.stderr
    assert "dsh: error [REDIS_READ_ONLY]" in done.stderr and "Traceback" not in done.stderr


def test_a_command_whose_writes_redis_refuses_names_the_refusal(
    topics: KafkaSettings, own_redis: RedisServer
) -> None:
    """`dsh replay` against a Redis out of memory: the refusal and its fix, not a traceback."""
    session = simple_session(f"oom-cli-{uuid.uuid4().hex[:6]}", turns=1)
    publish(topics, events_of(session))
    env = projector_env(topics, f"redis://127.0.0.1:{own_redis.port}/0")
    with redis.Redis(port=own_redis.port) as node:
        node.config_set("maxmemory-policy", "noeviction")
        node.config_set("maxmemory", 1)
        try:
            done = run_dsh(env, "replay", session.id, timeout=60)
        finally:
            node.config_set("maxmemory", 0)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "dsh: error [REDIS_WRITES_REFUSED]" in done.stderr, done.stderr
    assert "OOM" in done.stderr and "maxmemory" in done.stderr
    assert "Traceback" not in done.stderr
