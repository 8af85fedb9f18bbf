"""Ports a process binds, and the HTTP port of a service (``/metrics``, ``/livez``,
``/readyz``): a taken one is ``PORT_IN_USE`` naming the setting that chose it, never an
``OSError`` traceback."""

from __future__ import annotations

import errno
import json
import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from dsh.errors import SessionError, register_error
from servicekit.health import MEDIA_TYPE, Health

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication

    from prometheus_client import CollectorRegistry


@register_error
class PortInUseError(SessionError):
    default_code = "PORT_IN_USE"

    def __init__(self, port: int, purpose: str, setting: str | None = None) -> None:
        fix = f"set {setting} to another port" if setting else "choose another port"
        super().__init__(
            f"port {port} ({purpose}) is already in use by another process; stop it or {fix}"
        )
        self.port = port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR a port in TIME_WAIT after our own `dsh down` would look taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def require_free_port(port: int, purpose: str, setting: str) -> None:
    """Before a service connects to anything: a taken port fails at once, not after start-up."""
    if port and not port_is_free(port, "0.0.0.0"):
        raise PortInUseError(port, purpose, setting)


def serve_http(
    port: int, setting: str, health: Health | None, registry: CollectorRegistry | None = None
) -> WSGIServer | None:
    """``/metrics`` (Prometheus: ``registry``, by default the process's own), ``/livez`` and
    ``/readyz`` (``health``; ``None``: the service answers them elsewhere) on ``port`` (``0``:
    none), on daemon threads until ``shutdown()``; a taken port is ``PORT_IN_USE`` naming
    ``setting``."""
    if not port:
        return None
    try:
        server = make_server("", port, _app(health, registry), _ThreadingServer, _QuietHandler)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise PortInUseError(port, "/metrics", setting) from None
    threading.Thread(target=server.serve_forever, name="dsh-http", daemon=True).start()
    return server


def _app(health: Health | None, registry: CollectorRegistry | None) -> WSGIApplication:
    from prometheus_client import REGISTRY, make_wsgi_app  # the services', not every command's

    metrics: WSGIApplication = make_wsgi_app(registry or REGISTRY)
    probes = {"/livez": health.liveness, "/readyz": health.readiness} if health else {}

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        probe = probes.get(environ.get("PATH_INFO", ""))
        if probe is None:
            return metrics(environ, start_response)
        status, body = probe()
        data = json.dumps(body).encode()
        media = "application/json" if status == 200 else MEDIA_TYPE
        reason = "OK" if status == 200 else "Service Unavailable"
        start_response(
            f"{status} {reason}",
            [("Content-Type", media), ("Content-Length", str(len(data)))],
        )
        return [data]

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """A slow readiness check (a Redis that does not answer) holds up only its own request."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a probe every few seconds
        pass
