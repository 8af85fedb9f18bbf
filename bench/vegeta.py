"""The HTTP load of the serve benchmark: vegeta (a Go load tool), installed by ``go install`` at
a pinned version into the ignored ``.state/tools/bin``, run at a constant rate (open loop,
each request's latency from its scheduled start) or at full speed from a fixed number of
workers (closed loop, for throughput)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stack import REPO

MODULE = "github.com/tsenart/vegeta/v12"
VERSION = "v12.13.0"
TOOLS = REPO / ".state" / "tools" / "bin"


def vegeta() -> Path:
    """The vegeta binary, built from the Go module proxy on first use (needs Go)."""
    binary = TOOLS / "vegeta"
    if not binary.exists():
        go = shutil.which("go")
        if go is None:
            raise SystemExit("the serve benchmark needs Go to install vegeta (go install)")
        TOOLS.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [go, "install", f"{MODULE}@{VERSION}"],
            env={**os.environ, "GOBIN": str(TOOLS)},
            check=True,
            timeout=900,
        )
    return binary


@dataclass(frozen=True)
class Target:
    method: str
    url: str
    body: bytes | None = None

    def line(self) -> str:
        """One target in vegeta's JSON format."""
        target: dict[str, Any] = {"method": self.method, "url": self.url}
        if self.body is not None:
            target["body"] = base64.b64encode(self.body).decode()
            target["header"] = {"Content-Type": ["application/json"]}
        return json.dumps(target)


@dataclass(frozen=True)
class Report:
    requests: int
    success: float  # the share of 2xx answers
    throughput: float  # successful requests per second
    p50_ms: float
    p99_ms: float
    status_codes: dict[str, int]


def attack(
    targets: Sequence[Target], seconds: float, *, rate: float = 0, workers: int = 10
) -> Report:
    """``targets`` in turn (round robin) for ``seconds``: ``rate`` requests/s whatever the
    answers take (open loop), or with ``rate`` 0 as fast as ``workers`` connections go."""
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        targets_file, results = Path(tmp) / "targets.json", Path(tmp) / "results.bin"
        targets_file.write_text("\n".join(t.line() for t in targets) + "\n")
        pacing = [f"-rate={rate:g}/1s"] if rate else ["-rate=0", f"-max-workers={workers}"]
        with results.open("wb") as out:
            subprocess.run(
                [
                    str(vegeta()),
                    "attack",
                    "-format=json",
                    f"-targets={targets_file}",
                    f"-duration={seconds:g}s",
                    f"-workers={workers}",
                    "-timeout=30s",
                    *pacing,
                ],
                stdout=out,
                check=True,
                timeout=seconds + 120,
            )
        report = subprocess.run(
            [str(vegeta()), "report", "-type=json", str(results)],
            capture_output=True,
            check=True,
            timeout=120,
        )
    data = json.loads(report.stdout)
    latencies = data["latencies"]
    return Report(
        requests=data["requests"],
        success=data["success"],
        throughput=data["throughput"],
        p50_ms=latencies["50th"] / 1e6,
        p99_ms=latencies["99th"] / 1e6,
        status_codes=data["status_codes"],
    )
