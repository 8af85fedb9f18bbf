from __future__ import annotations

from pathlib import Path

from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings

# The checkout this module lives in; state stays inside it (ignored by git) so that a
# clean clone owns everything it downloads or creates and `rm -rf .state` resets it.
REPO_ROOT = Path(__file__).resolve().parents[2]


def _default_state_root() -> Path:
    if (REPO_ROOT / "pyproject.toml").exists():
        return REPO_ROOT / ".state"
    return Path.home() / ".cache" / "dsh-pipeline"


class LocalStackSettings(StrictSettings):
    """The local development stack (``DSH_LOCAL_*``).

    Broker ``i`` (0-based) listens on ``kafka_port + i`` and its controller on
    ``controller_port + i``; ``brokers=3`` gives the fault-test cluster.
    """

    model_config = SettingsConfigDict(env_prefix="DSH_LOCAL_", extra="forbid", frozen=True)

    state_dir: Path = _default_state_root() / "local"
    jars_dir: Path | None = None
    kafka_version: str = "4.1.1"
    brokers: int = 1
    kafka_port: int = 19092
    controller_port: int = 19192
    redis_port: int = 16379
    # /metrics of the local services: the writer on this port, the surface, transcript and
    # audit projectors on the next three; 0: no /metrics (status then checks only the pid).
    metrics_port: int = 19464
    kafka_heap: str = "512m"
    partitions: int = 8
    startup_timeout_s: float = 90.0

    def kafka_jars_dir(self) -> Path:
        return self.jars_dir or _default_state_root() / f"kafka-{self.kafka_version}" / "libs"

    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka_port + i}" for i in range(self.brokers))

    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"
