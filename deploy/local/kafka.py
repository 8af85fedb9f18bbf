"""A real Apache Kafka cluster in KRaft mode on loopback, run from Maven Central jars.

Each node is a combined broker+controller. One node is the development default; three give
the fault-test cluster (replication factor 3, min ISR 2), so the same code serves both.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from deploy.local.errors import LocalStackError
from deploy.local.processes import ManagedProcess, port_accepts
from deploy.local.settings import LocalStackSettings

POM = Path(__file__).with_name("pom.xml")
_COMPLETE = ".complete"
_JAR_SET = 2

_LOG4J2 = """\
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log_dir}/server.log
appender.file.filePattern = {log_dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka_request.name = kafka.request.logger
logger.kafka_request.level = WARN
"""


# For a JVM that lives seconds or a few minutes (a tool, a storage format, the test suite's
# brokers): the client compiler alone and the serial collector start it in less CPU than the
# server defaults, and compile slower code for sustained load (docs/benchmarks.md).
SHORT_LIVED_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def ensure_kafka_jars(settings: LocalStackSettings) -> Path:
    """Resolve the broker's jars from Maven Central once, with their class archive
    (:func:`class_archive`); later calls reuse them."""
    libs = settings.kafka_jars_dir()
    if _complete(libs, settings):
        if not class_archive(libs).exists() and not class_archive_refused(libs).exists():
            _make_class_archive(libs)
        return libs
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            raise LocalStackError(
                f"`{tool}` is not on PATH; Kafka's jars are resolved with Maven, run on Java 17+",
                code="TOOL_MISSING",
            )
    libs.parent.mkdir(parents=True, exist_ok=True)
    # Copy into a fresh folder and rename it into place, so an interrupted download never
    # leaves a half-filled libs folder that looks complete.
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    result = subprocess.run(
        [
            "mvn", "-q", "-B", "-f", str(POM),
            "dependency:copy-dependencies",
            f"-Dkafka.version={settings.kafka_version}",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if result.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        raise LocalStackError(
            f"resolving Kafka {settings.kafka_version} jars from Maven Central failed:\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}",
            code="JARS_UNAVAILABLE",
        )
    (staging / _COMPLETE).write_text(_stamp(settings))
    for stale in (class_archive(libs), class_archive_refused(libs)):
        stale.unlink(missing_ok=True)
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    _make_class_archive(libs)
    return libs


def class_archive(libs: Path) -> Path:
    """Kafka's classes as a JVM loaded them once (a dynamic AppCDS archive), beside the jars:
    a JVM given it maps them instead of loading and verifying each again, which takes about a
    second of CPU off every broker, storage format and tool started. One that cannot use it
    (other jars, another JDK) loads the classes as before, silently (:func:`_archive_flags`)."""
    return libs.parent / f"{libs.name}.jsa"


def class_archive_refused(libs: Path) -> Path:
    """Where a JDK's refusal to make the archive is kept: while it exists, none is made."""
    return libs.parent / f"{libs.name}.jsa-refused"


# The JVM's warnings about an archive it cannot use would go to stdout, into a tool's output.
_QUIET_CDS = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def _archive_flags(libs: Path) -> list[str]:
    archive = class_archive(libs)
    if not archive.exists():
        return []
    return [f"-XX:SharedArchiveFile={archive}", *_QUIET_CDS]


def _make_class_archive(libs: Path) -> None:
    """Record the classes of a storage format (most of what a broker loads first) as the JVM
    exits; a JDK that cannot is remembered (``.jsa-refused``) and not asked again."""
    with tempfile.TemporaryDirectory(prefix="kafka-cds-") as tmp:
        home = Path(tmp)
        (home / "server.properties").write_text(
            "process.roles=broker,controller\nnode.id=1\n"
            "controller.quorum.voters=1@127.0.0.1:9\ncontroller.listener.names=CONTROLLER\n"
            "listeners=PLAINTEXT://127.0.0.1:9,CONTROLLER://127.0.0.1:10\n"
            f"log.dirs={home / 'data'}\n"
        )
        dumped = home / "classes.jsa"
        result = subprocess.run(
            [
                java(), *SHORT_LIVED_JVM, f"-XX:ArchiveClassesAtExit={dumped}", *_QUIET_CDS,
                "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format",
                f"--cluster-id={new_cluster_id()}", "-c", str(home / "server.properties"),
            ],
            capture_output=True,
            check=False,
        )  # fmt: skip
        if result.returncode == 0 and dumped.exists():
            os.replace(dumped, class_archive(libs))
        else:
            class_archive_refused(libs).write_text(result.stderr.decode(errors="replace")[-2000:])


# Kafka's command-line tools by the name of their script without ``kafka-`` and ``.sh``.
TOOLS = {
    "configs": "kafka.admin.ConfigCommand",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "topics": "org.apache.kafka.tools.TopicCommand",
    "transactions": "org.apache.kafka.tools.TransactionsCommand",
}


def tool_command(settings: LocalStackSettings, tool: str, args: list[str]) -> list[str]:
    """The java command line of Kafka's ``tool`` (a key of :data:`TOOLS`) on the stack's own
    jars, fetched first if need be; quiet logging, as the scripts set it."""
    libs = ensure_kafka_jars(settings)
    return [
        java(), "-Xmx256m", *SHORT_LIVED_JVM, *_archive_flags(libs),
        "-Dlog4j2.level=warn", "-cp", f"{libs}/*", TOOLS[tool], *args,
    ]  # fmt: skip


def java() -> str:
    """The java to run: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else the PATH's."""
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else "java"


def _stamp(settings: LocalStackSettings) -> str:
    """What a complete libs folder holds: the version, and which set of jars (2: with the
    command-line tools), so a folder from before the tools is resolved again."""
    return f"{settings.kafka_version} jars={_JAR_SET}\n"


def _complete(libs: Path, settings: LocalStackSettings) -> bool:
    try:
        return (libs / _COMPLETE).read_text() == _stamp(settings)
    except OSError:
        return False


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes, URL-safe base64, never starting with "-".

    Kafka's own Uuid.randomUuid draws again on a leading "-" for the same reason: command-line
    tools would take such an id for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    home: Path

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def process(self) -> ManagedProcess:
        return ManagedProcess(
            f"kafka node {self.node_id} (port {self.port})",
            self.home / "kafka.pid",
            self.home / "stdout.log",
            # The properties path is on the java command line and unique to this node.
            marker=str(self.properties),
        )


class KafkaCluster:
    def __init__(self, settings: LocalStackSettings) -> None:
        self.settings = settings
        self.home = settings.state_dir / "kafka"
        self.nodes = [
            KafkaNode(
                node_id=i + 1,
                port=settings.kafka_port + i,
                controller_port=settings.controller_port + i,
                home=self.home / f"node-{i + 1}",
            )
            for i in range(settings.brokers)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return self.settings.bootstrap_servers()

    def ports(self) -> dict[int, str]:
        ports: dict[int, str] = {}
        for node in self.nodes:
            ports[node.port] = f"Kafka node {node.node_id} listener"
            ports[node.controller_port] = f"Kafka node {node.node_id} controller"
        return ports

    def running_nodes(self) -> list[KafkaNode]:
        return [node for node in self.nodes if node.process().is_running()]

    def start(self) -> None:
        libs = ensure_kafka_jars(self.settings)
        cluster_id = self._cluster_id()
        for node in self.nodes:
            if node.process().is_running():
                continue
            self._write_config(node)
            if not (node.data_dir / "meta.properties").exists():
                self._format(node, libs, cluster_id)
            node.process().start(self._java(node, libs, "kafka.Kafka", str(node.properties)))

    def start_node(self, node: KafkaNode) -> None:
        """Restart one stopped node (fault tests bring a killed broker back)."""
        libs = ensure_kafka_jars(self.settings)
        node.process().start(self._java(node, libs, "kafka.Kafka", str(node.properties)))

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Wait until every node listens and the cluster reports all brokers in its metadata."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + (timeout_s or self.settings.startup_timeout_s)
        for node in self.nodes:
            while not port_accepts(node.port):
                if not node.process().is_running():
                    raise node.process().fail("exited during start-up")
                if time.monotonic() > deadline:
                    raise node.process().fail(f"port {node.port} did not open in time")
                time.sleep(0.2)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        missing = list(self.nodes)
        while True:
            # A node can die after its port opened (another of its listeners could not bind):
            # say so now, with its log, rather than wait out the deadline for its registration.
            for node in self.nodes:
                if not node.process().is_running():
                    raise node.process().fail("exited during start-up")
            try:
                metadata = admin.list_topics(timeout=2)
                if len(metadata.brokers) == len(self.nodes):
                    break
            except Exception as exc:  # KafkaException while the controller elects itself
                last = exc
            else:
                missing = [n for n in self.nodes if n.node_id not in metadata.brokers]
                last = LocalStackError(f"{len(metadata.brokers)} of {len(self.nodes)} brokers up")
            if time.monotonic() > deadline:
                logs = "".join(
                    f"\n--- last lines of {n.process().log_file} ---\n{n.process().log_tail()}"
                    for n in missing
                )
                raise LocalStackError(
                    f"Kafka did not become ready in time: {last}{logs}", code="TIMEOUT"
                )
            time.sleep(0.3)
        self._warm_coordinators(deadline)

    def _warm_coordinators(self, deadline: float) -> None:
        """Make the transaction and group coordinators load before we call Kafka ready.

        Both internal topics are created on first use; until they are loaded, clients get
        COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR. Services retry those, but "ready"
        should mean a first transaction and a first offset fetch succeed at once.
        """
        from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

        remaining = max(deadline - time.monotonic(), 1.0)
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "transactional.id": "dsh-local-readiness",
                # "Coordinator load in progress: retrying" is what this waits out, not news.
                "log_level": 3,
            }
        )
        try:
            producer.init_transactions(remaining)
        except KafkaException as exc:
            raise LocalStackError(
                f"Kafka transactions are not available: {exc}", code="TIMEOUT"
            ) from exc
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap_servers, "group.id": "dsh-local-readiness"}
        )
        try:
            while True:
                try:
                    consumer.committed([TopicPartition("__dsh_readiness", 0)], timeout=2)
                    return
                except KafkaException as exc:
                    if time.monotonic() > deadline:
                        raise LocalStackError(
                            f"Kafka's group coordinator did not load in time: {exc}", code="TIMEOUT"
                        ) from exc
                    time.sleep(0.2)
        finally:
            consumer.close()

    def stop(self) -> int:
        # Signal every node at once: stopped one by one, the last nodes lose the controller
        # quorum and their controlled shutdown waits for it until the SIGKILL deadline.
        for node in self.nodes:
            node.process().terminate()
        return sum(node.process().stop(timeout_s=30) for node in self.nodes)

    def _cluster_id(self) -> str:
        path = self.home / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        self.home.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        path.write_text(cluster_id + "\n")
        return cluster_id

    def _write_config(self, node: KafkaNode) -> None:
        node.home.mkdir(parents=True, exist_ok=True)
        count = len(self.nodes)
        replication = min(3, count)
        min_isr = min(2, count)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        lines = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": node.data_dir,
            # On one node these must be 1, or the coordinator can never create its internal
            # topics and init_transactions hangs.
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
            "default.replication.factor": replication,
            "min.insync.replicas": min_isr,
            # Fewer internal partitions: coordinator start-up is faster on a 2-core machine.
            "offsets.topic.num.partitions": 8,
            "transaction.state.log.num.partitions": 8,
            "group.initial.rebalance.delay.ms": 0,
            # Topics are created on purpose with their own settings; a typo must not make one.
            "auto.create.topics.enable": "false",
            "num.partitions": self.settings.partitions,
        }
        node.properties.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        (node.home / "log4j2.properties").write_text(_LOG4J2.format(log_dir=node.home / "logs"))

    def _format(self, node: KafkaNode, libs: Path, cluster_id: str) -> None:
        argv = self._format_argv(node, libs, cluster_id)
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LocalStackError(
                f"formatting Kafka storage for node {node.node_id} failed:\n"
                f"{result.stdout}{result.stderr}",
                code="FORMAT_FAILED",
            )

    def _format_argv(
        self, node: KafkaNode, libs: Path, cluster_id: str, extra: Sequence[str] = ()
    ) -> list[str]:
        # "--cluster-id=ID", not "-t ID": argparse4j reads an id that starts with "-" as an
        # option, and cluster.id files written before new_cluster_id() may hold one.
        return self._java(
            node, libs, "kafka.tools.StorageTool", "format", "--ignore-formatted",
            f"--cluster-id={cluster_id}", "-c", str(node.properties), *extra,
        )  # fmt: skip

    def _java(self, node: KafkaNode, libs: Path, main: str, *args: str) -> list[str]:
        return [
            java(),
            "-Xms128m",
            f"-Xmx{self.settings.kafka_heap}",
            *shlex.split(self.settings.kafka_jvm_options),
            *_archive_flags(libs),
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node.home / 'log4j2.properties'}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]


class ExtraListenerCluster(KafkaCluster):
    """A cluster whose nodes keep their PLAINTEXT listener (the operator's loopback door) and
    also listen with ``protocol`` on ``extra_port + i``; subclasses add that listener's
    settings in :meth:`_listener_settings`."""

    protocol = ""  # a Kafka security protocol, also the listener's name
    label = ""  # how port-conflict messages name the listener

    def __init__(self, settings: LocalStackSettings, extra_port: int) -> None:
        super().__init__(settings)
        self.extra_port = extra_port

    def extra_bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.extra_port + i}" for i in range(len(self.nodes)))

    def ports(self) -> dict[int, str]:
        ports = super().ports()
        for i, node in enumerate(self.nodes):
            ports[self.extra_port + i] = f"Kafka node {node.node_id} {self.label} listener"
        return ports

    def _write_config(self, node: KafkaNode) -> None:
        super()._write_config(node)
        address = f"{self.protocol}://127.0.0.1:{self.extra_port + node.node_id - 1}"
        lines = []
        for line in node.properties.read_text().splitlines():
            key, _, value = line.partition("=")
            if key in ("listeners", "advertised.listeners"):
                value = f"{value},{address}"
            elif key == "listener.security.protocol.map":
                value = f"{value},{self.protocol}:{self.protocol}"
            lines.append(f"{key}={value}")
        lines += self._listener_settings(node)
        node.properties.write_text("\n".join(lines) + "\n")

    def _listener_settings(self, node: KafkaNode) -> list[str]:
        return []
