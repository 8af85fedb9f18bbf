"""A 3-node KRaft cluster and a Redis whose every network link runs through a toxiproxy
proxy, so a test can cut, slow or half-cut one link and leave the others whole.

Kafka tells a client the addresses of the listener it came in on, so each node advertises its
proxies' ports, not its own:

- client *lanes* (``SERVICES``, ``VICTIM``, ``CLIENT``): a listener per lane on every node, each
  behind its own proxy, so one process (the lane's only user) can be cut off from every broker
  while the others keep theirs;
- broker to broker, per direction: node ``i`` reaches its peers through listener ``FROM<i>``
  (its ``inter.broker.listener.name``), and every node's ``FROM<i>`` has a proxy of its own;
- controller traffic, per direction: each node's ``controller.quorum.voters`` names its own
  proxy for each peer.

So "node 2 cannot send to its peers, but they still reach it" is a set of proxies to cut. The
plain ``PLAINTEXT`` listener stays direct: the operator's door, which the checker uses."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from deploy.local.kafka import KafkaCluster, KafkaNode
from deploy.local.processes import free_ports
from deploy.local.settings import LocalStackSettings
from servicekit.settings import KafkaSettings
from tests.support.toxiproxy import Toxiproxy

LANES = ("SERVICES", "VICTIM", "CLIENT")


@dataclass(frozen=True)
class Link:
    """One proxied TCP link: clients dial ``listen``; the proxy forwards to ``upstream``."""

    name: str
    listen: int
    upstream: int


@dataclass
class Links:
    """Every link of the cluster, by kind; each becomes a proxy named ``Link.name``."""

    lanes: dict[str, dict[int, Link]] = field(default_factory=dict)  # lane → node → link
    replication: dict[tuple[int, int], Link] = field(default_factory=dict)  # (from, to) → link
    controller: dict[tuple[int, int], Link] = field(default_factory=dict)  # (from, to) → link
    redis: Link | None = None

    own_replication: dict[int, int] = field(default_factory=dict)  # node → its FROM<self> port

    @classmethod
    def plan(cls, controller_ports: dict[int, int], redis_port: int) -> Links:
        """Ports for every link, given each node's controller port and Redis' port."""
        nodes = sorted(controller_ports)
        pairs = [(a, b) for a in nodes for b in nodes if a != b]
        # Lane: listener and proxy; replication pair: listener and proxy; controller pair:
        # proxy; node: its own FROM<self> listener; Redis: proxy.
        ports = iter(free_ports(2 * len(LANES) * len(nodes) + 3 * len(pairs) + len(nodes) + 1))
        links = cls()
        for lane in LANES:
            links.lanes[lane] = {
                n: Link(f"{lane.lower()}-{n}", listen=next(ports), upstream=next(ports))
                for n in nodes
            }
        for a, b in pairs:
            links.replication[a, b] = Link(f"repl-{a}-to-{b}", next(ports), next(ports))
            links.controller[a, b] = Link(f"ctl-{a}-to-{b}", next(ports), controller_ports[b])
        links.own_replication = {n: next(ports) for n in nodes}
        links.redis = Link("redis", next(ports), redis_port)
        return links

    def all(self) -> Iterator[Link]:
        for by_node in self.lanes.values():
            yield from by_node.values()
        yield from self.replication.values()
        yield from self.controller.values()
        if self.redis is not None:
            yield self.redis

    def outbound(self, node: int) -> list[str]:
        """The proxies that carry what ``node`` sends to its peers (and their answers)."""
        return [
            link.name
            for (a, _), link in (*self.replication.items(), *self.controller.items())
            if a == node
        ]

    def broker_links(self) -> list[str]:
        """Every proxy between a client or a broker and a broker."""
        return [link.name for link in self.all() if link is not self.redis]

    def bootstrap(self, lane: str) -> str:
        return ",".join(f"127.0.0.1:{link.listen}" for link in self.lanes[lane].values())

    def redis_url(self) -> str:
        assert self.redis is not None
        return f"redis://127.0.0.1:{self.redis.listen}/0"


class ProxiedKafkaCluster(KafkaCluster):
    def __init__(self, settings: LocalStackSettings, links: Links) -> None:
        super().__init__(settings)
        self.links = links

    def _ids(self) -> list[int]:
        return [n.node_id for n in self.nodes]

    def _write_config(self, node: KafkaNode) -> None:
        super()._write_config(node)
        me = node.node_id
        listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        for lane, by_node in self.links.lanes.items():
            link = by_node[me]
            listeners.append(f"{lane}://127.0.0.1:{link.upstream}")
            advertised.append(f"{lane}://127.0.0.1:{link.listen}")
        for source in self._ids():
            name = f"FROM{source}"
            if source == me:
                port = self.links.own_replication[me]
                listeners.append(f"{name}://127.0.0.1:{port}")
                advertised.append(f"{name}://127.0.0.1:{port}")
            else:
                link = self.links.replication[source, me]
                listeners.append(f"{name}://127.0.0.1:{link.upstream}")
                advertised.append(f"{name}://127.0.0.1:{link.listen}")
        names = ["PLAINTEXT", "CONTROLLER", *self.links.lanes, *(f"FROM{s}" for s in self._ids())]
        voters = ",".join(
            f"{n.node_id}@127.0.0.1:"
            + str(
                n.controller_port
                if n.node_id == me
                else self.links.controller[me, n.node_id].listen
            )
            for n in self.nodes
        )
        settings = {
            "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(f"{n}:PLAINTEXT" for n in names),
            "inter.broker.listener.name": f"FROM{me}",
            "controller.quorum.voters": voters,
        }
        lines = []
        for line in node.properties.read_text().splitlines():
            key, _, value = line.partition("=")
            lines.append(f"{key}={settings.pop(key, value)}")
        lines += [f"{key}={value}" for key, value in settings.items()]
        node.properties.write_text("\n".join(lines) + "\n")


def start_proxies(toxiproxy: Toxiproxy, links: Links) -> None:
    for link in links.all():
        toxiproxy.proxy(link.name, link.listen, link.upstream)


def lane_settings(kafka: KafkaSettings, links: Links, lane: str) -> KafkaSettings:
    """``kafka`` (this test's topics) reached through ``lane``'s proxies."""
    return kafka.model_copy(update={"bootstrap_servers": links.bootstrap(lane)})
