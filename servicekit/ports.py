"""Ports a process binds: a taken one is ``PORT_IN_USE`` naming the setting that chose it,
never an ``OSError`` traceback."""

from __future__ import annotations

import errno
import socket

from dsh.errors import SessionError, register_error


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


def serve_metrics(port: int, setting: str) -> None:
    """Prometheus ``/metrics`` on ``port`` (``0``: none), as ``PORT_IN_USE`` if it is taken."""
    from prometheus_client import start_http_server

    if not port:
        return
    try:
        start_http_server(port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise PortInUseError(port, "/metrics", setting) from None
