"""The projectors' two-phase Redis link: batches submitted back to back are executed in order,
their replies read in any order, a failed command is a value, a broken link fails them all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis._parsers import _HiredisParser, _RESP2Parser

from deploy.local.redis_server import RedisServer
from projectors.link import RedisLink, raise_errors
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
