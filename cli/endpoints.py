"""Which Kafka and Redis a command talks to: what the environment names explicitly
(``DSH_KAFKA_BOOTSTRAP_SERVERS``, ``DSH_REDIS_URL``), else the local stack recorded in the
state dir by `dsh up` (from any shell, on whatever ports it was started with), else the local
stack's default ports, with a note on stderr saying so: a read never goes silently to another
stack that holds them.

Resolved here, in the composition root, and passed down as settings: the services and tools
below never look for a stack themselves.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from deploy.local.record import in_environment, read_record, resolved_settings
from servicekit.settings import KafkaSettings, RedisSettings

KAFKA_VARIABLE = "DSH_KAFKA_BOOTSTRAP_SERVERS"
REDIS_VARIABLE = "DSH_REDIS_URL"


@dataclass(frozen=True)
class Endpoints:
    bootstrap_servers: str | None  # None: the environment's (or KafkaSettings' default)
    redis_url: str | None
    local_stack: bool  # a local stack's (whose writer `dsh up` runs)


_noted: set[str] = set()


def resolve() -> Endpoints:
    explicit_kafka, explicit_redis = in_environment(KAFKA_VARIABLE), in_environment(REDIS_VARIABLE)
    if explicit_kafka and explicit_redis:
        return Endpoints(None, None, local_stack=False)
    local = resolved_settings()  # the recorded stack's ports, where one is recorded
    servers, url = local.bootstrap_servers(), local.redis_url()
    if read_record(local.state_dir) is None and str(local.state_dir) not in _noted:
        _noted.add(str(local.state_dir))
        print(
            f"dsh: note: no local stack is recorded in {local.state_dir} (`dsh up` starts "
            f"one); using its default ports, Kafka {servers} and Redis {url}. Set "
            f"{KAFKA_VARIABLE} and {REDIS_VARIABLE} to use another pipeline.",
            file=sys.stderr,
        )
    return Endpoints(
        None if explicit_kafka else servers,
        None if explicit_redis else url,
        local_stack=not explicit_kafka,
    )


def kafka_settings() -> KafkaSettings:
    servers = resolve().bootstrap_servers
    return KafkaSettings() if servers is None else KafkaSettings(bootstrap_servers=servers)


def redis_settings() -> RedisSettings:
    url = resolve().redis_url
    return RedisSettings() if url is None else RedisSettings(url=url)  # type: ignore[arg-type]


def writer_hint() -> str:
    """How to get a writer running, for a command that found none answering."""
    if resolve().local_stack:
        return "the local stack runs it: `dsh up` starts it again (`dsh status` shows it)"
    return f"start one with `dsh writer` on the Kafka of {KAFKA_VARIABLE}"
