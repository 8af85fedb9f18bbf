"""A real local stack: Apache Kafka (KRaft, jars from Maven Central) and Debian's Redis.

`dsh up` / `dsh down` / `dsh status` and the test fixtures drive it through :mod:`.stack`.
"""

from deploy.local.errors import LocalStackError, PortInUseError
from deploy.local.kafka import KafkaCluster
from deploy.local.redis_server import RedisServer
from deploy.local.settings import LocalStackSettings
from deploy.local.stack import LocalStack

__all__ = [
    "KafkaCluster",
    "LocalStack",
    "LocalStackError",
    "LocalStackSettings",
    "PortInUseError",
    "RedisServer",
]
