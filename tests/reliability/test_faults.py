"""Faults under a pipelined load of many sessions, each checked against the client's history:
every acknowledged append in the events topic exactly once, in order, seqs contiguous, and the
three projections verified against the core for every session."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import redis
from confluent_kafka.admin import AdminClient

from deploy.local.redis_server import RedisServer
from deploy.local.stack import LocalStack
from servicekit.watchdog import STUCK_EXIT_CODE
from tests.reliability.harness import (
    PARTITIONS,
    History,
    Load,
    Namespace,
    Pipeline,
    Service,
    VisibilityWatch,
    judge,
    longest_stall,
    projections_reach,
    run_load,
    sessions_spread,
    split,
)
from tests.reliability.nemesis import fully_replicated
from tests.support.waiting import wait_for

ALL = list(range(PARTITIONS))
BROKER_DOWN_S = 5.0


def test_sigkill_a_writer_mid_transaction(
    ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    with Pipeline(ns) as pipeline:
        a, b = pipeline.writers
        victim = a.owned() or []

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            a.kill()
            took = wait_for(lambda: b.owned() == ALL, 60, "the survivor owning every partition")
            return {"takeover_s": took, "victim_partitions": len(victim)}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        log = b.log()
        assert all(f"partition {p} restored" in log for p in victim)
        judge("writer SIGKILL", pipeline, ns, load, redis_client, history, extra)


def _owns_all(writer: Service) -> bool:
    return writer.owned() == ALL


def test_a_rolling_restart_of_the_writers_hands_over_without_a_client_retry(
    ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """A deploy: each writer in turn stops on SIGTERM and a new process takes its place. A
    graceful stop commits its last transaction and leaves the group, so the other writer owns
    its partitions without waiting out a session or a transaction, and no append's reply is
    lost (the client never has to retry)."""
    with Pipeline(ns) as pipeline:
        a, b = pipeline.writers

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            figures: dict[str, Any] = {}
            started = time.monotonic()
            for old, other in ((a, b), (b, a)):
                old.expected_down = True  # a deploy, not a crash: the supervisor stays out
                stopping = time.monotonic()
                old.signal(signal.SIGTERM)
                assert old.process is not None
                assert old.process.wait(30) == 0, f"{old.name} did not stop cleanly"
                figures[f"{old.name}_stop_s"] = time.monotonic() - stopping
                wait_for(partial(_owns_all, other), 30, f"{other.name} owning all")
                figures[f"{old.name}_handover_s"] = time.monotonic() - stopping
                old.start()
                figures[f"{old.name}_rejoin_s"] = wait_for(
                    lambda: split(pipeline.writers), 60, "the writers splitting again"
                )
            figures["longest_stall_s"] = longest_stall(history, started)
            return figures

        # A retry must mean a lost reply, not a slow one on a loaded machine: a long timeout.
        sessions = sessions_spread(load.sessions)
        history, extra = run_load(ns, load, sessions, fault, client_timeout=30.0)
        assert history.retries == 0, f"{history.retries} appends timed out during the restarts"
        logs = [w.log() for w in pipeline.writers]
        assert not any("the last transaction did not commit" in log for log in logs)
        refused = "aborted: KafkaError{code=ILLEGAL_GENERATION"  # ours, not librdkafka's line
        extra["generation_aborts"] = sum(log.count(refused) for log in logs)
        extra["produced_again"] = sum(log.count("generation moved") for log in logs)
        extra["partition_restores"] = sum(log.count(" restored in ") for log in logs)
        judge("writer rolling restart", pipeline, ns, load, redis_client, history, extra)


def _leaders(ns: Namespace, bootstrap: str) -> dict[int, int]:
    """Broker id → how many of this test's commands/events partitions it leads."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    counts: dict[int, int] = {}
    for name in ("commands", "events"):
        for p in metadata.topics[ns.kafka.topic(name)].partitions.values():
            counts[p.leader] = counts.get(p.leader, 0) + 1
    return counts


def _group_coordinator(bootstrap: str, group: str) -> int:
    """The broker coordinating ``group``: the leader of its __consumer_offsets partition, which
    Kafka picks as abs(Java hashCode of the group id) modulo the partition count."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    offsets = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    partitions = offsets.topics["__consumer_offsets"].partitions
    return partitions[abs(signed) % len(partitions)].leader


def _sigkill_a_broker_and_bring_it_back(
    name: str,
    pick: Callable[[Namespace, str], int],
    ns: Namespace,
    load: Load,
    redis_client: redis.Redis,
    cluster: LocalStack,
) -> None:
    bootstrap = cluster.settings.bootstrap_servers()
    topics = [ns.kafka.topic(n) for n in ("commands", "events", "replies")]
    with Pipeline(ns) as pipeline:
        leaders = _leaders(ns, bootstrap)
        node_id = pick(ns, bootstrap)
        node = next(n for n in cluster.kafka.nodes if n.node_id == node_id)

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            node.process().kill()
            time.sleep(BROKER_DOWN_S)  # down while the load goes on, then back
            cluster.kafka.start_node(node)
            return {
                "broker": node_id,
                "partitions_led": leaders.get(node_id, 0),
                "down_s": BROKER_DOWN_S,
            }

        try:
            history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        finally:
            if not node.process().is_running():
                cluster.kafka.start_node(node)
        extra["broker_rejoin_s"] = wait_for(
            lambda: fully_replicated(bootstrap, topics), 120, "the broker back in every ISR"
        )
        # The writers recover in process (a new producer, restores tried again). The one exit
        # allowed is the watchdog's, for a librdkafka call that kept waiting on a coordinator
        # past its timeout (servicekit/watchdog.py): no recovery in process can end that call.
        exits = {w.name: w.exit_codes for w in pipeline.writers if w.exit_codes}
        assert all(code == STUCK_EXIT_CODE for codes in exits.values() for code in codes), exits
        assert all(w.alive() for w in pipeline.writers)
        extra["writers_ended_stuck"] = sum(len(codes) for codes in exits.values())
        logs = [w.log() for w in pipeline.writers]
        extra["new_producers"] = sum(log.count("new producer for") for log in logs)
        extra["restore_retries"] = sum(log.count("trying again in") for log in logs)
        judge(name, pipeline, ns, load, redis_client, history, extra)


def test_sigkill_the_broker_leading_busy_partitions_and_bring_it_back(
    ns: Namespace, load: Load, redis_client: redis.Redis, cluster: LocalStack
) -> None:
    def busiest(ns: Namespace, bootstrap: str) -> int:
        leaders = _leaders(ns, bootstrap)
        return max(leaders, key=lambda n: leaders[n])

    _sigkill_a_broker_and_bring_it_back("broker SIGKILL", busiest, ns, load, redis_client, cluster)


def test_sigkill_the_writers_group_coordinator_and_bring_it_back(
    ns: Namespace, load: Load, redis_client: redis.Redis, cluster: LocalStack
) -> None:
    """The fault that once left a writer in send_offsets_to_transaction for minutes: the broker
    coordinating the writers' group goes, then comes back."""

    def coordinator(ns: Namespace, bootstrap: str) -> int:
        return _group_coordinator(bootstrap, ns.writer_env()["DSH_WRITER_GROUP_ID"])

    _sigkill_a_broker_and_bring_it_back(
        "group coordinator SIGKILL", coordinator, ns, load, redis_client, cluster
    )


def test_a_paused_writer_past_its_session_timeout_is_fenced(
    ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    with Pipeline(ns) as pipeline:
        a, b = pipeline.writers

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            a.signal(signal.SIGSTOP)
            took = wait_for(lambda: b.owned() == ALL, 60, "the other writer taking over")
            return {"takeover_s": took}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        # The zombie wakes up with a transaction of commands it took before the pause: it
        # must publish none of them (the history check below finds any double or gap).
        a.signal(signal.SIGCONT)
        wait_for(
            lambda: any(w in a.log() for w in ("partitions lost", "transaction aborted", "fenced")),
            30,
            "the zombie noticing it was fenced",
        )
        time.sleep(2)  # anything it could still publish would be committed by now
        judge("writer SIGSTOP (zombie)", pipeline, ns, load, redis_client, history, extra)


def test_sigkill_a_projector_mid_batch(
    ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    with Pipeline(ns) as pipeline:
        surface = pipeline.projectors["surface"]

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            killed = time.monotonic()
            surface.kill()
            time.sleep(1.0)  # down for a second while the load goes on, then restarted
            targets = history.last_seq()  # events it has certainly not applied yet
            surface.start()
            took = wait_for(
                lambda: projections_reach(redis_client, ns.key_prefix, targets, ["surface"]),
                90,
                "the restarted surface projector catching up",
            )
            return {"recovery_s": time.monotonic() - killed, "catch_up_s": took}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        judge("projector SIGKILL", pipeline, ns, load, redis_client, history, extra)


def test_a_rolling_restart_of_two_surface_projectors_moves_only_the_partitions_that_change_hands(
    ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """A deploy of a projection run by two instances: each in turn stops on SIGTERM and a new
    process takes its place. The cooperative protocol moves only what changes hands: the
    instance that stays is never asked to give up a partition while the other leaves, so its
    sessions stay live. Records how long any session's surface lagged its acknowledgements."""
    with Pipeline(ns) as pipeline:
        first = pipeline.projectors["surface"]
        second = ns.projector("surface", name="surface-b")
        pipeline.projectors["surface-b"] = second
        instances = [first, second]
        wait_for(lambda: split(instances), 60, "two surface projectors splitting the partitions")

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            figures: dict[str, Any] = {}
            with VisibilityWatch(redis_client, ns.key_prefix, history, "surface") as watch:
                time.sleep(1.0)
                figures["surface_lag_before_s"] = watch.longest
                for old, other in ((first, second), (second, first)):
                    revoked_before = other.log().count("partitions revoked")
                    old.expected_down = True
                    stopping = time.monotonic()
                    old.signal(signal.SIGTERM)
                    assert old.process is not None
                    assert old.process.wait(30) == 0, f"{old.name} did not stop cleanly"
                    wait_for(partial(_owns_all, other), 30, f"{other.name} owning all")
                    figures[f"{old.name}_handover_s"] = time.monotonic() - stopping
                    # Eager rebalancing would have revoked everything the other owned here.
                    assert other.log().count("partitions revoked") == revoked_before
                    old.start()
                    figures[f"{old.name}_rejoin_s"] = wait_for(
                        lambda: split(instances), 60, "the two splitting again"
                    )
                time.sleep(1.0)
                figures["surface_lag_longest_s"] = watch.longest
                # Sessions that waited: under cooperative rebalancing, those of moved partitions.
                figures["sessions_lagging_over_0_5_s"] = watch.sessions_over(0.5)
            return figures

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        logs = "".join(p.log() for p in instances)
        extra["partitions_revoked"] = logs.count("partitions revoked")
        extra["partitions_lost"] = logs.count("partitions lost")
        judge("surface projector rolling restart", pipeline, ns, load, redis_client, history, extra)


def test_redis_restarted_empty_is_rebuilt_from_the_log(
    ns: Namespace, load: Load, redis_client: redis.Redis, cluster: LocalStack
) -> None:
    with Pipeline(ns) as pipeline:

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            targets = history.last_seq()
            server: RedisServer = cluster.redis
            server.stop()
            server.start()
            server.wait_ready()
            back = time.monotonic()
            wait_for(
                lambda: projections_reach(
                    redis_client, ns.key_prefix, targets, ("surface", "transcript", "audit")
                ),
                120,
                "the projections rebuilt from the log",
            )
            return {"recovery_s": time.monotonic() - back}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        judge("Redis restart (empty)", pipeline, ns, load, redis_client, history, extra)


HANG_AFTER_S = 12.0  # writer-a's first transaction past this (load under way) never ends
GRACE_S = 2.0


def test_a_writer_stuck_in_a_kafka_call_is_ended_by_its_watchdog_and_replaced(
    ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """librdkafka's send_offsets_to_transaction can wait for ever on a coordinator it cannot
    reach (#5456, #5511): the writer keeps heartbeating, so its partitions stay with it and
    are served by nobody. The failpoint makes that call hang; the watchdog must end the
    process past the call's timeout and grace, and a fresh one must serve every session,
    losing and doubling nothing."""
    failpoint = {"failpoint": f"hang-in-send-offsets-after:{HANG_AFTER_S}"}
    with Pipeline(ns, first_writer=failpoint, stuck_call_grace_s=GRACE_S) as pipeline:
        a, _ = pipeline.writers

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            # Under a slow start the hang may come before the load is warm: wait for it
            # either way, and time it from the writer's own log lines, not from here.
            wait_for(lambda: "failpoint: hanging" in a.log(), 60, "writer-a hanging")
            wait_for(lambda: bool(a.exit_codes), 90, "the watchdog ending writer-a")
            return {}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        assert a.exit_codes == [STUCK_EXIT_CODE]
        log = a.log()
        assert "in send_offsets" in log  # the stuck thread's stack, for whoever reads it
        hung = _logged_at(log, "failpoint: hanging in send_offsets_to_transaction")
        ended = _logged_at(log, "send_offsets_to_transaction has not returned")
        extra["stuck_exit_s"] = round(ended - hung, 2)
        # Past the call's own timeout and the grace (the watchdog looks once a second), and
        # not much later. Timed by log lines: the hang's is written a moment after the call
        # began (and each is cut to the millisecond), and the watchdog's look may come just
        # past the bound, so a tenth of a second's room; a watchdog without the grace ends it
        # a second or more early.
        assert 30 + GRACE_S - 0.1 <= extra["stuck_exit_s"] < 30 + GRACE_S + 15, extra
        judge("writer stuck call", pipeline, ns, load, redis_client, history, extra)


def _logged_at(log: str, message: str) -> float:
    """The time (epoch seconds) of the first structured log line whose message starts so."""
    for line in log.splitlines():
        if line.startswith("{") and message in line:
            record = json.loads(line)
            if record["message"].startswith(message):
                return datetime.fromisoformat(record["time"]).timestamp()
    raise AssertionError(f"no log line {message!r}")
