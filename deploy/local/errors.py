from dsh.errors import SessionError, register_error
from servicekit.ports import PortInUseError


@register_error
class LocalStackError(SessionError):
    """The local Kafka/Redis stack could not be installed, started or stopped."""

    default_code = "LOCAL_STACK"


@register_error
class StackRunningError(LocalStackError):
    """`dsh up` with other ports than those of the stack already running in its state dir."""

    default_code = "STACK_RUNNING"


__all__ = ["LocalStackError", "PortInUseError", "StackRunningError"]
