"""The projectors' two-phase Redis link: batches submitted back to back are executed in order,
their replies read in any order, a failed command is a value, a broken link fails them all."""

from __future__ import annotations

import pytest
import redis

from projectors.link import RedisLink, raise_errors


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
