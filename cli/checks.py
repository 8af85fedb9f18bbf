"""Pre-flight checks and error translation for the `dsh` commands: a broker or Redis that is
not there, or a topic nobody created, is an error naming the fix, not a hang or a traceback.

Imports Kafka and Redis lazily, inside each function, like every other CLI module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.errors import SessionError, register_error

if TYPE_CHECKING:
    from servicekit.settings import KafkaSettings


@register_error
class RedisUnreachableError(SessionError):
    default_code = "REDIS_UNREACHABLE"


@register_error
class RedisReadOnlyError(SessionError):
    default_code = "REDIS_READ_ONLY"


@register_error
class RedisWritesRefusedError(SessionError):
    default_code = "REDIS_WRITES_REFUSED"


def require_kafka(
    kafka: KafkaSettings, names: Sequence[str] = ("events",), timeout_s: float = 10.0
) -> dict[str, int]:
    """Partition counts of the named topics (``events``, ``commands``, …), or the error that
    names the fix (``KAFKA_UNREACHABLE``, ``TOPIC_MISSING``) within ``timeout_s``."""
    from servicekit.topics import partition_counts

    return partition_counts(kafka, [kafka.topic(name) for name in names], timeout_s, quiet=True)


def translate(exc: BaseException) -> SessionError | None:
    """A Redis connection failure, a write a replica (or Redis' own state) refused, or a
    setting a settings class refused, escaping a command, as the error that names the fix.
    Looks the classes up only if redis (pydantic) was imported at all: `import dsh` stays free
    of them."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        from servicekit.settings import settings_error

        return settings_error(exc)
    redis = sys.modules.get("redis")
    if redis is not None and isinstance(exc, redis.exceptions.ReadOnlyError):
        return RedisReadOnlyError(
            "Redis refused a write: the server DSH_REDIS_URL leads to is a replica (READONLY). "
            "Point DSH_REDIS_URL at the primary, or name the Sentinels in DSH_REDIS_SENTINELS "
            "so that every service follows the primary"
        )
    if redis is not None and isinstance(exc, redis.exceptions.ResponseError):
        from projectors.link import REFUSAL_FIXES, WritesRefusedError, refused

        refusal = exc if isinstance(exc, WritesRefusedError) else refused(exc)
        if isinstance(refusal, WritesRefusedError):
            return RedisWritesRefusedError(
                f"{refusal}; {REFUSAL_FIXES.get(refusal.code, 'see the Redis log')}, then run "
                "the command again"
            )
    if redis is not None and isinstance(
        exc,
        redis.exceptions.ConnectionError
        | redis.exceptions.TimeoutError
        # A Redis Cluster none of whose nodes answers, or one that answers it is down (no
        # primary for a slot): neither is a ConnectionError in redis-py.
        | redis.exceptions.RedisClusterException
        | redis.exceptions.ClusterDownError,
    ):
        return RedisUnreachableError(
            f"Redis did not answer ({exc}); is Redis running? `dsh up` starts it (or set "
            "DSH_REDIS_URL)",
        )
    return None


def default_interpreters() -> None:
    """Commands that rebuild sessions from the topic (verify, replay) register the reference
    ``image/offload`` interpreter unless DSH_PROJECTOR_PROJECTIONS says otherwise (empty: none).
    It is what the local stack's writer and projectors run with, and it is harmless elsewhere:
    a log holds an image/offload event only if the writer had an interpreter for it."""
    from interpreters import OFFLOAD_SPEC

    os.environ.setdefault("DSH_PROJECTOR_PROJECTIONS", OFFLOAD_SPEC)
