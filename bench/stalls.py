"""What stalled while a benchmark timed round trips: the machine, from Linux's pressure stall
information (PSI, /proc/pressure) and the page cache's dirty and writeback bytes, sampled in
a thread; and the benchmark's own process, from its garbage collections. On a shared 2-core
machine a latency tail is as often the box or the harness as the code under test; setting
the slowest second beside the stalls of that same second says which.

PSI's ``total`` is the time, in µs, during which at least one task (``some``) or every
non-idle task (``full``) waited for the resource; its growth over a second is how much of
that second was lost waiting. Where the files are missing (an old kernel, no PSI) the
stall figures are absent, not zero.
"""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PSI = Path("/proc/pressure")
MEMINFO = Path("/proc/meminfo")
STALLS = ("cpu some", "io some", "io full", "memory some")


@dataclass(frozen=True)
class Sample:
    at: float  # the sampler's clock
    stalled_us: dict[str, int]  # cumulative, one entry per name in STALLS the kernel has
    dirty_kb: int
    writeback_kb: int


def read_sample(clock: Callable[[], float] = time.monotonic) -> Sample:
    stalled: dict[str, int] = {}
    for resource in ("cpu", "io", "memory"):
        try:
            lines = (PSI / resource).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            kind, *fields = line.split()
            total = dict(field.split("=", 1) for field in fields)["total"]
            stalled[f"{resource} {kind}"] = int(total)
    memory: dict[str, int] = {}
    for line in MEMINFO.read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Dirty", "Writeback"):
            memory[name] = int(rest.split()[0])
    return Sample(clock(), stalled, memory.get("Dirty", 0), memory.get("Writeback", 0))


class PressureSampler:
    """Samples every ``interval`` seconds while the ``with`` block runs; times are read from
    ``clock``, the one the benchmark times its operations with."""

    def __init__(self, interval: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pressure", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(read_sample(self.clock))
            self._stop.wait(self.interval)
        self.samples.append(read_sample(self.clock))

    def __enter__(self) -> PressureSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def between(self, start: float, end: float) -> dict[str, float]:
        """Stall ms per second of ``[start, end]`` for each PSI line, and the most dirty and
        writeback MB seen in it."""
        inside = [s for s in self.samples if start <= s.at <= end]
        before = [s for s in self.samples if s.at < start]
        first = before[-1] if before else (inside[0] if inside else None)
        if first is None or not inside:
            return {}
        last = inside[-1]
        seconds = max(last.at - first.at, 1e-3)
        out = {
            f"{name} ms/s": (last.stalled_us[name] - first.stalled_us[name]) / 1000 / seconds
            for name in STALLS
            if name in first.stalled_us
        }
        out["dirty MB max"] = max(s.dirty_kb for s in inside) / 1024
        out["writeback MB max"] = max(s.writeback_kb for s in inside) / 1024
        return out


def slowest_second(
    timed: list[tuple[float, float]], sampler: PressureSampler, slow_ms: float
) -> dict[str, Any]:
    """``timed`` holds (sent at, latency ms) per operation. Finds the second (by send time,
    one-second steps from the first send) whose slowest operation is the slowest, and sets the
    machine's stalls in it beside those of the median second."""
    if not timed:
        return {}
    origin = min(sent for sent, _ in timed)
    seconds: dict[int, list[float]] = {}
    for sent, ms in timed:
        seconds.setdefault(int(sent - origin), []).append(ms)
    worst = max(seconds, key=lambda k: max(seconds[k]))
    # The operations sent in the worst second finish up to their latency later: the stalls
    # that delayed them are looked for until the slowest one returned.
    start = origin + worst
    end = start + 1 + max(seconds[worst]) / 1000
    per_second = [sampler.between(origin + k, origin + k + 1) for k in sorted(seconds)]
    typical = {
        name: statistics.median(second.get(name, 0.0) for second in per_second)
        for name in (per_second[0] if per_second else {})
    }
    return {
        "at_s": worst,
        "max_ms": max(seconds[worst]),
        "slow": sum(ms > slow_ms for ms in seconds[worst]),
        "operations": len(seconds[worst]),
        "slow_in_run": sum(ms > slow_ms for _, ms in timed),
        "stalls": sampler.between(start, end),
        "typical_stalls": typical,
    }


def describe(worst: dict[str, Any], slow_ms: float) -> str:
    """One line for a benchmark's printout."""
    if not worst:
        return "no operations timed"
    stalls = worst["stalls"]
    typical = worst["typical_stalls"]
    parts = [
        f"{name.removesuffix(' ms/s')} {stalls[name]:.0f} (median second "
        f"{typical.get(name, 0.0):.0f})"
        for name in stalls
        if name.endswith("ms/s")
    ]
    return (
        f"slowest second at +{worst['at_s']} s: max {worst['max_ms']:.1f} ms, "
        f"{worst['slow']} of {worst['operations']} over {slow_ms:g} ms "
        f"({worst['slow_in_run']} in the whole run); stalls, ms per s: "
        + (", ".join(parts) or "no PSI on this kernel")
        + f"; dirty at most {stalls.get('dirty MB max', 0.0):.0f} MB, writeback "
        f"{stalls.get('writeback MB max', 0.0):.0f} MB"
    )


def settle() -> None:
    """Starts a latency phase from a synced disk and a frozen heap, so that it measures a
    steady rate, not what the phases before it left:
    - their writes (hundreds of MB) are written back now, not 30 s later in the middle of it
      (io stalls of 35-161 ms/s in the writer's paced phase's slowest second, 3 of 3 runs);
    - what they left in this process is swept now and frozen, not walked by a gen-2
      collection in the middle of it (24-40 ms, seen in 2 of 2 runs)."""
    os.sync()
    gc.collect()
    gc.freeze()


class ClientGcPauses:
    """Collections of this (the client's) process while the block runs, per generation:
    [count, total ms], and the longest one. A pause here delays every reply the client is
    waiting for."""

    def __init__(self) -> None:
        self.by_generation: dict[str, list[float]] = {str(g): [0, 0.0] for g in range(3)}
        self.longest_ms = 0.0
        self._started = 0.0

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            ms = (time.perf_counter() - self._started) * 1000
            entry = self.by_generation[str(info["generation"])]
            entry[0] += 1
            entry[1] += ms
            self.longest_ms = max(self.longest_ms, ms)

    @property
    def observing(self) -> bool:
        return self._observe in gc.callbacks

    def start(self) -> None:
        if not self.observing:
            gc.callbacks.append(self._observe)

    def stop(self) -> None:
        if self.observing:
            gc.callbacks.remove(self._observe)

    def __enter__(self) -> ClientGcPauses:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
