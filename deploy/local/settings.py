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
    """The local stack of `dsh up`, `dsh demo`, `dsh status` and `dsh down` (``DSH_LOCAL_*``)."""

    model_config = SettingsConfigDict(env_prefix="DSH_LOCAL_", extra="forbid", frozen=True)

    state_dir: Path = _default_state_root() / "local"
    """Data and logs of the local stack: `.state/local` in the checkout
    (`~/.cache/dsh-pipeline/local` when installed without one)."""
    jars_dir: Path | None = None
    """Where Apache Kafka's jars are (default: resolved from Maven Central into
    `.state/kafka-<version>/libs`)."""
    kafka_version: str = "4.1.1"
    """Apache Kafka release the local stack runs."""
    brokers: int = 1
    """Kafka nodes, each broker and controller; `3` starts the fault-test cluster (replication
    factor 3, min ISR 2)."""
    kafka_port: int = 19092
    """Listener of node 1; node *i* listens on this port + *i* - 1."""
    controller_port: int = 19192
    """KRaft controller listener of node 1; node *i* uses this port + *i* - 1."""
    redis_port: int = 16379
    """Port of the local Redis."""
    metrics_port: int = 19464
    """`/metrics` of the local writer; the surface, transcript and audit projectors use the
    next three ports (`0`: no `/metrics`, and `dsh status` checks only the processes)."""
    kafka_heap: str = "512m"
    """JVM heap of each Kafka node (`-Xmx`)."""
    kafka_jvm_options: str = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20"
    """Other JVM options of each Kafka node, as a shell would split them. The test suite's
    brokers, many and short-lived, run `-XX:TieredStopAtLevel=1 -XX:+UseSerialGC`: a fraction
    of the CPU to start and to idle, for slower code under sustained load."""
    partitions: int = 8
    """Partitions of each topic `dsh up` creates."""
    startup_timeout_s: float = 90.0
    """How long `dsh up` waits for the Kafka cluster to be ready."""

    def kafka_jars_dir(self) -> Path:
        return self.jars_dir or _default_state_root() / f"kafka-{self.kafka_version}" / "libs"

    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka_port + i}" for i in range(self.brokers))

    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"
