"""The soak's fault classes: each injects one real fault into the running pipeline (SIGKILL,
SIGSTOP, a stopped Redis, a killed broker) and undoes it, and says what it did.

A fault class is anything with a ``name`` and ``inject(target, rng) -> str``; the scheduler in
:mod:`tests.reliability.soak` picks one at random, one at a time. The network class is
pluggable: ``BrokerUnreachable`` (the default) freezes a broker with SIGSTOP, so every peer and
client keeps its TCP connections and gets no answer, as behind a partition that drops packets;
a proxy-based class (toxiproxy) can take its place with the same two members."""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka.admin import AdminClient

from deploy.local.kafka import KafkaNode
from deploy.local.stack import LocalStack
from tests.reliability.harness import Namespace, Pipeline, Service
from tests.support.waiting import wait_for

PAUSE_S = 8.0  # past the services' 6 s session timeout: the group moves their partitions
BROKER_DOWN_S = 5.0
UNREACHABLE_S = 8.0


@dataclass
class Target:
    """What the faults act on: the pipeline's processes and the cluster's servers."""

    pipeline: Pipeline
    cluster: LocalStack
    ns: Namespace

    def services(self) -> list[Service]:
        return self.pipeline.services()

    def topics(self) -> list[str]:
        return [self.ns.kafka.topic(n) for n in ("commands", "events", "replies", "snapshots")]


class FaultClass(Protocol):
    name: str

    def inject(self, target: Target, rng: random.Random) -> str:
        """Inject the fault and undo it (a process restarted, a server back); returns what was
        done, for the record. Recovery is measured by the caller, from the load."""
        ...

    def settle(self, target: Target) -> None:
        """Wait until the system is whole again (not counted in the recovery time), so that
        the next fault never meets the last one's leftovers."""
        ...


class ServiceCrash:
    """SIGKILL of a writer or projector; back a second later, as a supervisor would."""

    name = "crash"

    def inject(self, target: Target, rng: random.Random) -> str:
        victim = rng.choice(target.services())
        victim.kill()
        time.sleep(1.0)
        victim.start()
        return f"SIGKILL {victim.name}, restarted after 1 s"

    def settle(self, target: Target) -> None:
        pass


class ServicePause:
    """SIGSTOP of a writer or projector past its session timeout, then SIGCONT: a zombie that
    wakes up to find its partitions gone."""

    name = "pause"

    def inject(self, target: Target, rng: random.Random) -> str:
        victim = rng.choice(target.services())
        victim.signal(signal.SIGSTOP)
        try:
            time.sleep(PAUSE_S)
        finally:
            victim.signal(signal.SIGCONT)
        return f"SIGSTOP {victim.name} for {PAUSE_S:.0f} s"

    def settle(self, target: Target) -> None:
        pass


class BrokerUnreachable:
    """The network class without a proxy: one broker stops answering (SIGSTOP), its sockets
    stay open, then it is back (SIGCONT)."""

    name = "network"

    def inject(self, target: Target, rng: random.Random) -> str:
        node = rng.choice(target.cluster.kafka.nodes)
        pid = _pid(node)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(UNREACHABLE_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        return f"broker {node.node_id} unreachable (SIGSTOP) for {UNREACHABLE_S:.0f} s"

    def settle(self, target: Target) -> None:
        wait_replicated(target)


class RedisRestart:
    """Redis stopped and started empty: the projectors replay the topic into it."""

    name = "redis-restart"

    def inject(self, target: Target, rng: random.Random) -> str:
        server = target.cluster.redis
        server.stop()
        server.start()
        server.wait_ready()
        return "Redis stopped and started empty"

    def settle(self, target: Target) -> None:
        pass


class BrokerRestart:
    """SIGKILL of a broker, started again after a few seconds."""

    name = "broker-restart"

    def inject(self, target: Target, rng: random.Random) -> str:
        node = rng.choice(target.cluster.kafka.nodes)
        node.process().kill()
        try:
            time.sleep(BROKER_DOWN_S)
        finally:
            target.cluster.kafka.start_node(node)
        return f"SIGKILL broker {node.node_id}, started after {BROKER_DOWN_S:.0f} s"

    def settle(self, target: Target) -> None:
        wait_replicated(target)


ALL_CLASSES: tuple[FaultClass, ...] = (
    ServiceCrash(),
    ServicePause(),
    BrokerUnreachable(),
    RedisRestart(),
    BrokerRestart(),
)


def _pid(node: KafkaNode) -> int:
    pid = node.process().pid()
    assert pid is not None, f"broker {node.node_id} is not running"
    return pid


def fully_replicated(bootstrap: str, topics: list[str]) -> bool:
    """Every partition of ``topics`` led and with all three replicas in sync."""
    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
    except Exception:
        return False
    return all(
        len(p.isrs) == 3 and p.leader >= 0
        for t in topics
        for p in metadata.topics[t].partitions.values()
    )


def wait_replicated(target: Target) -> None:
    """A broker fault is over once the broker is back in every ISR: only then may the next one
    take another broker (min ISR 2 of 3)."""
    bootstrap = target.cluster.settings.bootstrap_servers()
    wait_for(lambda: fully_replicated(bootstrap, target.topics()), 120, "every ISR full again")
