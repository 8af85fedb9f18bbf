"""Ports picked for servers that start later: never handed out twice while they may still be
unbound, and from this process's own slice when it has one."""

from __future__ import annotations

import pytest

from deploy.local import processes
from deploy.local.errors import LocalStackError
from deploy.local.processes import (
    LISTEN_PORTS_VARIABLE,
    free_port_block,
    free_ports,
    listen_port_range,
)


@pytest.fixture
def thousand_ports(monkeypatch: pytest.MonkeyPatch) -> range:
    """The top 1,000 ports of this worker's slice, and a fresh record of ports handed out (so
    the test withholds none of the worker's own)."""
    _, high = listen_port_range()
    ports = range(high - 1000, high)
    monkeypatch.setenv(LISTEN_PORTS_VARIABLE, f"{ports.start}-{ports.stop}")
    monkeypatch.setattr(processes, "_handed_out", {})
    return ports


def test_a_block_just_picked_is_not_handed_out_again_before_its_servers_bind(
    thousand_ports: range,
) -> None:
    base = free_port_block(10)
    block = set(range(base, base + 10))
    # 900 of the range's 1,000 at random would all but surely hit 10 unbound ports.
    picked = free_ports(900)
    assert len(set(picked)) == 900
    assert set(picked) <= set(thousand_ports)
    assert not block & set(picked)


def test_ports_handed_out_run_out_with_a_typed_error(thousand_ports: range) -> None:
    free_ports(950)
    with pytest.raises(LocalStackError) as raised:
        free_ports(100)
    assert raised.value.code == "PORTS_EXHAUSTED"
    assert f"{thousand_ports.start}-{thousand_ports.stop}" in str(raised.value)


@pytest.mark.parametrize("named", ["20000", "a-b", "30000-20000", "80-90", "60000-70000"])
def test_a_bad_port_range_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, named: str) -> None:
    monkeypatch.setenv(LISTEN_PORTS_VARIABLE, named)
    with pytest.raises(LocalStackError, match=LISTEN_PORTS_VARIABLE) as raised:
        free_ports(1)
    assert raised.value.code == "BAD_SETTING"


def test_each_xdist_worker_has_a_slice_of_its_own() -> None:
    """The suite's conftest gives each worker its slice; without xdist there is none."""
    import os

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("runs under pytest-xdist")
    low, high = listen_port_range()
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    assert high - low >= 1000
    assert low == processes.LISTEN_PORTS_FROM + int(worker.removeprefix("gw")) * (high - low)
    assert (high - low) * count <= processes._listen_ports_below() - processes.LISTEN_PORTS_FROM
