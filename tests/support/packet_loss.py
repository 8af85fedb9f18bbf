"""Random packet loss on chosen loopback ports, with iptables' ``statistic`` match: each TCP
segment to or from one of the ports is dropped with the given probability, and TCP retransmits
it, as on a lossy link. Only those ports are touched (a chain of this run's own, removed on
exit); it needs root and iptables (``make test-tools`` installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

MULTIPORT_MAX = 15  # ports one multiport match takes


def available() -> str | None:
    """Why packet loss cannot be had here, or None."""
    if os.geteuid() != 0:
        return "packet loss needs root (iptables)"
    if shutil.which("iptables") is None:
        return "packet loss needs iptables: run `make test-tools`"
    return None


def _iptables(*args: str) -> None:
    subprocess.run(["iptables", "-w", "5", *args], check=True, capture_output=True, timeout=30)


@contextmanager
def packet_loss(ports: Sequence[int], probability: float) -> Iterator[None]:
    chain = f"DSH-LOSS-{uuid.uuid4().hex[:8]}"
    _iptables("-N", chain)
    try:
        for i in range(0, len(ports), MULTIPORT_MAX):
            group = ",".join(str(p) for p in ports[i : i + MULTIPORT_MAX])
            for side in ("--dports", "--sports"):
                _iptables(
                    "-A", chain, "-p", "tcp", "-m", "multiport", side, group,
                    "-m", "statistic", "--mode", "random", "--probability", str(probability),
                    "-j", "DROP",
                )  # fmt: skip
        _iptables("-I", "INPUT", "-i", "lo", "-j", chain)
        try:
            yield
        finally:
            _iptables("-D", "INPUT", "-i", "lo", "-j", chain)
    finally:
        _iptables("-F", chain)
        _iptables("-X", chain)
