"""A service that appends through ``SessionClient`` loads the client, not the writer: no writer
module is imported and no writer metric is registered in its Prometheus registry."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from prometheus_client import REGISTRY
from producers import SessionClient, draft
from producers.agents_session import DshAgentsSession
from producers.importer import import_file
names = sorted(n for c in REGISTRY.collect() for n in [c.name])
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.startswith(("producers", "projectors", "cli"))),
    "metrics": names,
}))
"""


def test_importing_the_client_loads_no_writer_module_and_no_writer_metric() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    assert "producers.client" in loaded["modules"]  # the probe did import the client
    assert [m for m in loaded["modules"] if m.startswith("producers.writer")] == []
    assert [m for m in loaded["modules"] if m.startswith(("projectors", "cli"))] == []
    assert "dsh_client_append_seconds" in loaded["metrics"]
    assert [n for n in loaded["metrics"] if n.startswith("dsh_writer")] == []
