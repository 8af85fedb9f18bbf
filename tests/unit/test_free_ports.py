"""Ports picked for servers that start later: never handed out twice while they may still be
unbound, and from this process's own slice when it has one."""

from __future__ import annotations

import pytest

from deploy.local import processes
from deploy.local.errors import LocalStackError
from deploy.local.processes import (
    LISTEN_PORTS_FROM,
    LISTEN_PORTS_VARIABLE,
    ephemeral_range_start,
    free_port_block,
    free_ports,
    listen_port_range,
    worker_slice,
)


@pytest.fixture
def thousand_ports(monkeypatch: pytest.MonkeyPatch) -> range:
    """The top 1,000 ports of this worker's slice, and a fresh record of ports handed out (so
    the test withholds none of the worker's own)."""
    _, high = listen_port_range()
    ports = range(high - 1000, high)
    monkeypatch.setenv(LISTEN_PORTS_VARIABLE, f"{ports.start}-{ports.stop}")
    monkeypatch.setattr(processes, "_handed_out", set())
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


def test_workers_slices_are_disjoint_and_a_replacement_shares_its_slots() -> None:
    slices = [worker_slice(20000, 32768, worker, 3) for worker in range(3)]
    assert slices == [(20000, 24256), (24256, 28512), (28512, 32768)]
    # xdist numbers a worker started in place of a crashed one past the others.
    assert worker_slice(20000, 32768, 3, 3) == slices[0]


@pytest.mark.parametrize(("low", "high", "workers"), [(20000, 32768, 13), (20000, 18000, 1)])
def test_a_slice_too_narrow_to_pick_from_is_none(low: int, high: int, workers: int) -> None:
    assert worker_slice(low, high, 0, workers) is None


def test_a_block_stays_within_the_range(thousand_ports: range) -> None:
    """The next worker's slice begins where this one's ends. A 100-port block from a random
    first port would overrun the range's end one time in ten."""
    for _ in range(40):
        processes._handed_out.clear()
        base = free_port_block(100)
        assert thousand_ports.start <= base and base + 100 <= thousand_ports.stop


def test_under_xdist_this_worker_picks_from_its_own_slice() -> None:
    import os

    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if worker is None or count is None:
        pytest.skip("runs under pytest-xdist")
    share = worker_slice(LISTEN_PORTS_FROM, ephemeral_range_start(), int(worker[2:]), int(count))
    assert share is not None
    assert listen_port_range() == share
    assert all(share[0] <= port < share[1] for port in free_ports(20))
