"""Settings of a three-node KRaft cluster and a Redis on free loopback ports."""

from __future__ import annotations

from pathlib import Path

from deploy.local.processes import free_port_block, free_ports
from deploy.local.settings import LocalStackSettings


def three_nodes(state_dir: Path, partitions: int, width: int = 10) -> LocalStackSettings:
    """Nodes use consecutive ports from the first one: listeners base…, controllers base + 5…;
    ``width`` reserves more after them (a SASL listener at base + 10…)."""
    base = free_port_block(width)
    return LocalStackSettings(
        state_dir=state_dir,
        brokers=3,
        kafka_port=base,
        controller_port=base + 5,
        redis_port=free_ports(1)[0],
        partitions=partitions,
    )
