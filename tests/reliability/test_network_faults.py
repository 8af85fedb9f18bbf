"""Network faults under the pipelined load, through a real fault proxy: every link of a
3-node cluster and of Redis runs through toxiproxy (``proxied.py``), and a fault cuts, half
cuts or slows the links it names while the processes keep running. Packet loss, which a TCP
proxy cannot make, comes from iptables' random drop on the proxies' ports. Each run is checked
as the other faults are: every acknowledged append in the events topic exactly once, in order,
seqs contiguous, and the three projections verified against the core."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka.admin import AdminClient

from deploy.local.kafka import tool_command
from deploy.local.processes import free_ports
from deploy.local.stack import LocalStack
from tests.reliability.harness import (
    PARTITIONS,
    History,
    Load,
    Namespace,
    Pipeline,
    judge,
    not_recovered,
    projections_behind,
    projections_reach,
    recovered,
    recovery_seconds,
    run_load,
    sessions_spread,
    split,
)
from tests.reliability.proxied import Links, ProxiedKafkaCluster, lane_settings, start_proxies
from tests.support import packet_loss
from tests.support.clusters import three_nodes
from tests.support.topics import fresh_topics
from tests.support.toxiproxy import Toxiproxy
from tests.support.waiting import wait_for

ALL = list(range(PARTITIONS))
CUT_S = 4.0  # a cut that needs no timeout to pass: long enough for several transactions
LATENCY_MS, JITTER_MS, LOSS = 200, 50, 0.05
SLOW_S = 4.0
PROJ = ["surface", "transcript", "audit"]


@dataclass
class Net:
    stack: LocalStack
    links: Links
    proxy: Toxiproxy

    def cut(self, names: list[str], stream: str = "both") -> None:
        for name in names:
            self.proxy.cut(name, stream)

    def heal(self, names: list[str]) -> None:
        for name in names:
            self.proxy.heal(name)

    def lane(self, lane: str) -> list[str]:
        return [link.name for link in self.links.lanes[lane].values()]


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    state = tmp_path_factory.mktemp("netfaults-stack")
    settings = three_nodes(state, PARTITIONS)
    controllers = {n: settings.controller_port + n - 1 for n in (1, 2, 3)}
    links = Links.plan(controllers, settings.redis_port)
    proxy = Toxiproxy(free_ports(1)[0], state / "toxiproxy.log")
    stack = LocalStack(settings, persistent=False)
    stack.kafka = ProxiedKafkaCluster(settings, links)
    try:
        start_proxies(proxy, links)
        stack.up(create_topics=False)
        yield Net(stack, links, proxy)
    finally:
        stack.down()
        proxy.close()


@pytest.fixture
def ns(net: Net, tmp_path: Path) -> Namespace:
    """This test's topics; its services reach the brokers through the ``SERVICES`` lane and
    Redis through its proxy, unless the test gives one its own lane."""
    direct = fresh_topics(net.stack.settings.bootstrap_servers(), PARTITIONS, "net")
    services = lane_settings(direct, net.links, "SERVICES")
    return Namespace(services, net.links.redis_url(), tmp_path, checker_kafka=direct)


@pytest.fixture
def redis_client(net: Net) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(net.stack.settings.redis_url())
    try:
        yield client
    finally:
        client.close()


def _served_again(history: History, load: Load, what: str) -> float:
    """From now until every session has an append acknowledged that was sent from now on."""
    counts, since = history.count_at(), time.monotonic()
    wait_for(
        lambda: recovered(history, counts, load.window),
        120,
        what,
        explain=lambda: not_recovered(history, counts, load.window),
    )
    return recovery_seconds(history, since, counts, load.window)


def _projection_caught_up(
    ns: Namespace, client: redis.Redis, history: History, projections: list[str]
) -> float:
    """From now until ``projections`` applied every session up to what is acknowledged now."""
    targets, since = history.last_seq(), time.monotonic()
    wait_for(
        lambda: projections_reach(client, ns.key_prefix, targets, projections),
        120,
        f"{projections} catching up",
        explain=lambda: projections_behind(client, ns.key_prefix, targets, projections),
    )
    return time.monotonic() - since


def test_a_writer_cut_off_from_the_brokers_past_its_session_timeout_is_fenced(
    net: Net, ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """Not killed, not paused: writer-a runs on, but nothing it sends reaches a broker and
    nothing comes back. The other writer takes its partitions once its session times out; when
    the network comes back, the stale writer must publish nothing (a double or a gap in the
    history) and rejoin as a fresh member."""
    ns.kafka_of["writer-a"] = lane_settings(ns.kafka, net.links, "VICTIM")
    victim = net.lane("VICTIM")
    with Pipeline(ns) as pipeline:
        a, b = pipeline.writers

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            cut_at = time.monotonic()
            net.cut(victim)
            try:
                took = wait_for(lambda: b.owned() == ALL, 60, "writer-b owning every partition")
                served = _served_again(history, load, "every session served by writer-b")
            finally:
                net.heal(victim)
            healed = time.monotonic()
            wait_for(
                lambda: any(w in a.log() for w in ("partitions lost", "transaction aborted")),
                60,
                "writer-a noticing it lost its partitions",
            )
            noticed = time.monotonic() - healed
            wait_for(lambda: split(pipeline.writers), 60, "writer-a back in the group")
            return {
                "takeover_s": took,
                "cut_s": healed - cut_at,
                "recovery_s": took + served,
                "stale_writer_noticed_s": noticed,
            }

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        time.sleep(2)  # anything the stale writer could still publish is committed by now
        judge("writer cut off from the brokers", pipeline, ns, load, redis_client, history, extra)


def test_a_projector_cut_off_from_redis_catches_up(
    net: Net, ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """Every projector's Redis link goes silent (no reset: a pulled cable) while appends go on,
    then comes back: each applies what it missed, exactly once."""
    with Pipeline(ns) as pipeline:
        assert net.links.redis is not None
        link = [net.links.redis.name]

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            net.cut(link)
            time.sleep(CUT_S)
            # The cut bit: appends went on, the projections could not follow.
            behind = not projections_reach(redis_client, ns.key_prefix, history.last_seq(), PROJ)
            net.heal(link)
            assert behind, "the projections kept up through the cut"
            return {
                "cut_s": CUT_S,
                "recovery_s": _projection_caught_up(ns, redis_client, history, PROJ),
            }

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        judge("projectors cut off from Redis", pipeline, ns, load, redis_client, history, extra)


def test_a_projector_cut_off_from_kafka_past_its_session_timeout_catches_up(
    net: Net, ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """The surface projector loses the brokers for longer than its group session: the group
    drops it. Back on the network it must find out, rejoin, and apply the rest exactly once
    (what it applied but could not commit comes again and is skipped by the seq guard)."""
    ns.kafka_of["surface"] = lane_settings(ns.kafka, net.links, "VICTIM")
    victim = net.lane("VICTIM")
    session_timeout_s = 6.0  # the harness' projector setting
    with Pipeline(ns) as pipeline:
        surface = pipeline.projectors["surface"]

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            net.cut(victim)
            time.sleep(session_timeout_s + 2)
            behind = not projections_reach(
                redis_client, ns.key_prefix, history.last_seq(), ["surface"]
            )
            net.heal(victim)
            assert behind, "the surface projection kept up through the cut"
            caught_up = _projection_caught_up(ns, redis_client, history, ["surface"])
            return {"cut_s": session_timeout_s + 2, "recovery_s": caught_up}

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        extra["partitions_lost"] = surface.log().count("partitions lost")
        judge("projector cut off from Kafka", pipeline, ns, load, redis_client, history, extra)


def test_the_client_cut_off_mid_append_gets_the_original_replies(
    net: Net, ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """The client's commands still reach the brokers but nothing comes back (replies, produce
    acknowledgements): every append in flight commits without the client knowing. Its retries
    with the same request ids, once the link is back, must be answered with the original events
    and append nothing."""
    client_lane = lane_settings(ns.kafka, net.links, "CLIENT")
    lane = net.lane("CLIENT")
    client_timeout = 3.0
    with Pipeline(ns) as pipeline:

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            net.cut(lane, stream="downstream")
            time.sleep(client_timeout + 1)  # past the client's timeout: every append retried
            net.heal(lane)
            return {
                "cut_s": client_timeout + 1,
                "recovery_s": _served_again(history, load, "every session served after the heal"),
            }

        history, extra = run_load(
            ns, load, sessions_spread(load.sessions), fault, client_timeout, client_lane
        )
        assert history.retries > 0, "no append timed out: the cut did not cut"
        judge("client cut off mid-append", pipeline, ns, load, redis_client, history, extra)


def test_latency_and_packet_loss_on_every_broker_link(
    net: Net, ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """200 ms more each way (± 50 ms) and 5 % of segments dropped on every link to and
    between the brokers, clients and inter-broker alike, for a few seconds of load."""
    why_not = packet_loss.available()
    if why_not:
        pytest.skip(why_not)
    names = net.links.broker_links()
    ports = [link.listen for link in net.links.all() if link.name in names]
    with Pipeline(ns) as pipeline:

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            before = history.total()
            with packet_loss.packet_loss(ports, LOSS):
                for name in names:
                    net.proxy.slow(name, LATENCY_MS, JITTER_MS)
                time.sleep(SLOW_S)
                for name in names:
                    net.proxy.clear(name)
            during = (history.total() - before) / SLOW_S
            return {
                "slow_s": SLOW_S,
                "events_per_s_degraded": during,
                "recovery_s": _served_again(history, load, "every session served after"),
            }

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        judge("latency 200 ms and 5 % loss", pipeline, ns, load, redis_client, history, extra)


def _quorum_leader(net: Net) -> int:
    node = net.stack.kafka.nodes[0]
    argv = tool_command(
        net.stack.settings,
        "metadata-quorum",
        ["--bootstrap-controller", f"127.0.0.1:{node.controller_port}", "describe", "--status"],
    )
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout
    found = re.search(r"LeaderId:\s+(\d+)", out)
    assert found, out
    return int(found.group(1))


def _leaders(bootstrap: str, topics: list[str]) -> dict[int, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    counts: dict[int, int] = {}
    for topic in topics:
        for p in metadata.topics[topic].partitions.values():
            counts[p.leader] = counts.get(p.leader, 0) + 1
    return counts


# Not in `make test`: it passes about one run in three (5 of 12). In the others every session
# stalls for the whole bound: the fenced node never hears it was fenced and goes on answering as
# leader and transaction/group coordinator, and clients that ask it keep using it (writers'
# transactions hang on it, a restore reads its log that no longer grows).
# RELIABILITY.md has the runs. DSH_RELIABILITY_ONE_WAY=1 runs it.
@pytest.mark.skipif(
    os.environ.get("DSH_RELIABILITY_ONE_WAY") != "1",
    reason="one-way leader isolation can stall every session while the cut lasts: "
    "DSH_RELIABILITY_ONE_WAY=1 runs it",
)
def test_a_leader_cut_off_from_its_peers_one_way_is_replaced(
    net: Net, ns: Namespace, load: Load, redis_client: redis.Redis
) -> None:
    """Leader isolation: the node leading the most partitions (not the quorum's leader) can
    no longer send to its peers, controllers included, while clients and its peers still reach
    it. Its broker heartbeats stop arriving, the controller fences it and moves its
    leaderships; it still believes it leads, and clients may still write to it, but nothing it
    accepts alone can be acknowledged (min ISR 2). Then the link comes back."""
    bootstrap = net.stack.settings.bootstrap_servers()
    topics = [ns.kafka.topic(n) for n in ("commands", "events", "replies")]
    with Pipeline(ns) as pipeline:
        quorum_leader = _quorum_leader(net)
        leaders = _leaders(bootstrap, topics)
        candidates = {n: c for n, c in leaders.items() if n != quorum_leader}
        isolated = max(candidates, key=lambda n: candidates[n])
        outbound = net.links.outbound(isolated)

        def fault(history: History, counts: dict[str, int]) -> dict[str, Any]:
            cut_at = time.monotonic()
            net.cut(outbound)
            try:
                # Sessions on the partitions it led stall until the controller fences it and
                # they have new leaders: this is the recovery, under the cut.
                served = _served_again(history, load, "every session served without it")
                survivors = ",".join(
                    f"127.0.0.1:{n.port}" for n in net.stack.kafka.nodes if n.node_id != isolated
                )
                still_led = _leaders(survivors, topics).get(isolated, 0)
            finally:
                net.heal(outbound)
            return {
                "isolated_node": isolated,
                "partitions_led": leaders.get(isolated, 0),
                "partitions_led_under_cut": still_led,
                "cut_s": time.monotonic() - cut_at,
                "recovery_s": served,
            }

        history, extra = run_load(ns, load, sessions_spread(load.sessions), fault)
        judge("leader isolated one way", pipeline, ns, load, redis_client, history, extra)
