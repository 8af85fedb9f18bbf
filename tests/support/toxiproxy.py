"""Toxiproxy (Shopify's TCP fault proxy) as a process of the test run, and the few calls of
its REST API the network-fault tests make: a proxy per link, cut, slowed, healed.

The server is a Go module, built into ``.state/tools`` by ``make test-tools``."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VERSION = "v2.5.0"  # the Makefile's TOXIPROXY_VERSION
TOOLS = REPO / ".state" / "tools"
SERVER = TOOLS / f"toxiproxy-server-{VERSION}"


def ensure_server() -> Path:
    if not SERVER.exists():
        raise RuntimeError(f"{SERVER} is missing: `make test-tools` builds it (needs Go)")
    return SERVER


class Toxiproxy:
    """One toxiproxy server on a loopback port; each link a named proxy."""

    def __init__(self, port: int, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        # Straight to loopback, whatever HTTP proxy the environment names.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [str(ensure_server()), "-host", "127.0.0.1", "-port", str(port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self._call("GET", "/proxies")
                return
            except (OSError, ValueError):  # not listening yet, or something else is there
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"toxiproxy did not start; see {log_path}") from None
                time.sleep(0.1)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self._log.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with self._opener.open(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def proxy(self, name: str, listen_port: int, upstream_port: int) -> None:
        self._call(
            "POST",
            "/proxies",
            {
                "name": name,
                "listen": f"127.0.0.1:{listen_port}",
                "upstream": f"127.0.0.1:{upstream_port}",
                "enabled": True,
            },
        )

    def _toxic(self, proxy: str, name: str, kind: str, stream: str, **attributes: int) -> None:
        self._call(
            "POST",
            f"/proxies/{proxy}/toxics",
            {
                "name": name,
                "type": kind,
                "stream": stream,
                "toxicity": 1.0,
                "attributes": attributes,
            },
        )

    def cut(self, proxy: str, stream: str = "both") -> None:
        """Data stops flowing, as through a pulled cable: connections stay open and silent
        (timeout 0: no close, no reset), new ones are accepted and hear nothing."""
        for direction in ("upstream", "downstream") if stream == "both" else (stream,):
            self._toxic(proxy, f"cut-{direction}", "timeout", direction, timeout=0)

    def slow(self, proxy: str, latency_ms: int, jitter_ms: int) -> None:
        """Every chunk each way waits ``latency_ms`` ± ``jitter_ms``."""
        for direction in ("upstream", "downstream"):
            self._toxic(
                proxy, f"slow-{direction}", "latency", direction,
                latency=latency_ms, jitter=jitter_ms,
            )  # fmt: skip

    def heal(self, proxy: str) -> None:
        """Every toxic off, and the connections opened through the fault closed: a cut dropped
        bytes mid-stream, so what they would carry next is no longer a whole frame. (A real
        network keeps the bytes and retransmits; clients reconnect after a reset either way.)"""
        for toxic in self._call("GET", f"/proxies/{proxy}/toxics"):
            self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic['name']}")
        self._call("POST", f"/proxies/{proxy}", {"enabled": False})
        self._call("POST", f"/proxies/{proxy}", {"enabled": True})

    def clear(self, proxy: str) -> None:
        """Every toxic off, connections kept (a latency toxic leaves them whole)."""
        for toxic in self._call("GET", f"/proxies/{proxy}/toxics"):
            self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic['name']}")

    def toxics(self) -> dict[str, list[str]]:
        """Proxy name → its toxics' names, for a failure message."""
        proxies = self._call("GET", "/proxies")
        return {name: [t["name"] for t in p["toxics"]] for name, p in proxies.items()}
