"""Ports and detached server processes tracked by pid files."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from deploy.local.errors import LocalStackError
from servicekit.ports import PortInUseError
from servicekit.ports import port_is_free as port_is_free  # where the tests find it


def require_free_ports(ports: dict[int, tuple[str, str]]) -> None:
    """Each port (purpose, the setting that chose it) free, or ``PORT_IN_USE`` naming it."""
    for port, (purpose, setting) in ports.items():
        if not port_is_free(port):
            raise PortInUseError(port, purpose, setting)


# Ports handed to servers that start later are picked here, below the OS's range of
# ephemeral ports: a port bind(0) returns is one the OS may give any outgoing connection (a
# Kafka client's, say) in the seconds before the server that was to listen on it starts.
LISTEN_PORTS_FROM = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Processes that pick ports at once (pytest-xdist's workers) each take their own slice of the
# range, "low-high": a port one picked, free until its server starts, is never the other's.
LISTEN_PORTS_VARIABLE = "DSH_TEST_LISTEN_PORTS"
# Below this many ports a range is too narrow to pick from at random: the OS picks instead.
NARROWEST_RANGE = 1000
# A port handed out is never handed out again by this process: it stays free until its
# server starts (a JVM's seconds), or while a test has its server down, and a second caller
# then (the proxies of a cluster whose own ports were just picked) would get it again. A test
# process hands out a few hundred at most.
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def ephemeral_range_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def listen_port_range() -> tuple[int, int]:
    """Where ``free_ports`` picks, ``low`` ≤ port < ``high``: this process's slice if
    ``DSH_TEST_LISTEN_PORTS`` names one, else from 20000 to the ephemeral range."""
    named = os.environ.get(LISTEN_PORTS_VARIABLE, "")
    if named:
        try:
            low, high = (int(part) for part in named.split("-"))
        except ValueError:
            raise LocalStackError(
                f"{LISTEN_PORTS_VARIABLE}={named!r} is not a range low-high", code="BAD_SETTING"
            ) from None
        if not 1024 <= low < high <= 65536:
            raise LocalStackError(
                f"{LISTEN_PORTS_VARIABLE}={named!r}: need 1024 <= low < high <= 65536",
                code="BAD_SETTING",
            )
        return low, high
    return LISTEN_PORTS_FROM, ephemeral_range_start()


def worker_slice(low: int, high: int, worker: int, workers: int) -> tuple[int, int] | None:
    """Worker ``worker``'s share of ``low``…``high`` when ``workers`` pick ports at once, or
    None where shares would be too narrow to pick from. A worker started in place of a crashed
    one (xdist numbers it past the others) shares its slot's slice, whose servers died with
    its predecessor."""
    width = (high - low) // workers
    if width < NARROWEST_RANGE:
        return None
    first = low + (worker % workers) * width
    return first, first + width


def free_ports(count: int) -> list[int]:
    """Distinct ports that are free right now and that this process has not handed out
    before, from ``listen_port_range`` where it leaves room (else the OS picks them)."""
    low, high = listen_port_range()
    sockets: list[socket.socket] = []
    with _handed_out_lock:
        tries = 0
        try:
            while len(sockets) < count:
                tries += 1
                if tries > 100 * count + 1000:
                    raise LocalStackError(
                        f"no {count} free ports left in {low}-{high} "
                        f"({len(_handed_out)} handed out already)",
                        code="PORTS_EXHAUSTED",
                    )
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                try:
                    if high - low < NARROWEST_RANGE:
                        sock.bind(("127.0.0.1", 0))
                    else:
                        sock.bind(("127.0.0.1", random.randrange(low, high)))
                except OSError:  # taken (or one of ours): another one
                    sockets.pop().close()
                    continue
                if sock.getsockname()[1] in _handed_out:
                    sockets.pop().close()
            ports = [s.getsockname()[1] for s in sockets]
        finally:
            for sock in sockets:
                sock.close()
        _handed_out.update(ports)
        return ports


def free_port_block(width: int, attempts: int = 50) -> int:
    """A first port P such that P … P + width - 1 are all free right now, for services that
    number their nodes' ports consecutively (a multi-node Kafka). A free port need not have
    free neighbours, so each candidate block is checked port by port; the block stays within
    this process's range (another's begins after it)."""
    low, high = listen_port_range()
    if high - low < NARROWEST_RANGE:
        high = 65536
    for _ in range(attempts):
        base = free_ports(1)[0]
        block = range(base, base + width)
        with _handed_out_lock:
            if block.stop <= high and all(
                port not in _handed_out and port_is_free(port) for port in block[1:]
            ):
                _handed_out.update(block)
                return base
    raise OSError(f"no block of {width} free ports found in {attempts} tries")


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


class ManagedProcess:
    """A server process started detached from the caller, found again through its pid file.

    The pid file records the pid and a marker that must appear in the process's command
    line, so a recycled pid is never mistaken for (or killed as) our server.
    """

    def __init__(self, name: str, pid_file: Path, log_file: Path, marker: str) -> None:
        self.name = name
        self.pid_file = pid_file
        self.log_file = log_file
        self.marker = marker

    def start(self, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the CLI that started it; ^C does not reach it
                env=env,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        # Popen returns once exec has closed its close-on-exec pipe, which the kernel does
        # before it sets up the new program's arguments: for a moment /proc/PID/cmdline is
        # empty and the process would not look like ours. Wait that moment out, so that
        # is_running() right after start() means what it says.
        deadline = time.monotonic() + 5.0
        while not self._is_ours(proc.pid) and proc.poll() is None:
            if time.monotonic() > deadline:
                raise self.fail(f"pid {proc.pid} never showed {self.marker!r} in its command line")
            time.sleep(0.001)
        return proc.pid

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        # A zombie has finished; only its parent has yet to reap it.
        state = stat.rsplit(")", 1)[-1].split()[0]
        return state != "Z" and self.marker.encode() in cmdline

    def is_running(self) -> bool:
        return self.pid() is not None

    def terminate(self) -> int | None:
        """Send SIGTERM without waiting; returns the pid signalled, if any."""
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        return pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout_s``. Returns whether a process was stopped."""
        pid = self.terminate()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._is_ours(pid):
            _reap(pid)
            time.sleep(0.1)
        if self._is_ours(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self._is_ours(pid):
                _reap(pid)
                time.sleep(0.05)
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL at once, as a crash would (fault tests)."""
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self._is_ours(pid):
                _reap(pid)
                time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def fail(self, reason: str) -> LocalStackError:
        return LocalStackError(
            f"{self.name}: {reason}\n--- last lines of {self.log_file} ---\n{self.log_tail()}"
        )


def _reap(pid: int) -> None:
    # Only succeeds when we are the parent (tests start servers in-process); else harmless.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
