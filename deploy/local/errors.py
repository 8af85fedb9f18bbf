from dsh.errors import SessionError, register_error


@register_error
class LocalStackError(SessionError):
    """The local Kafka/Redis stack could not be installed, started or stopped."""

    default_code = "LOCAL_STACK"


@register_error
class PortInUseError(LocalStackError):
    default_code = "PORT_IN_USE"

    def __init__(self, port: int, purpose: str) -> None:
        super().__init__(
            f"port {port} ({purpose}) is already in use by another process; stop it or choose "
            f"another port with the matching DSH_LOCAL_* variable",
        )
        self.port = port
