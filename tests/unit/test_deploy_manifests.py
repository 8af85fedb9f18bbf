"""Deployment manifests: parsed, cross-checked against the code, and run through real validators.

The checks no off-the-shelf validator makes are the valuable ones: every ``DSH_*`` variable a
manifest sets is a field of its settings class, with a value that class accepts (the services
refuse unknown names at start, so a typo would be a crash loop in production); every metric an
alert or a panel queries is one the services export; every command a container runs parses
with the real ``dsh`` CLI. External tools (promtool, kubectl, docker-compose,
kubernetes-validate) run when installed and skip with the install line when not.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import producers.client_metrics
import producers.writer.metrics
import projectors.metrics
import serve.metrics
from cli import build_parser
from deploy.local.settings import LocalStackSettings
from producers.writer.settings import WriterSettings
from projectors.catalog import PROJECTIONS
from projectors.settings import ProjectorSettings
from serve.settings import ServeSettings
from servicekit.settings import KafkaSettings, RedisSettings, StrictSettings
from servicekit.topics import TOPICS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "compose" / "compose.yaml"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"

SETTINGS_CLASSES: tuple[type[StrictSettings], ...] = (
    KafkaSettings,
    RedisSettings,
    WriterSettings,
    ProjectorSettings,
    ServeSettings,
    LocalStackSettings,
)
# The one image every dsh service runs; compose tags it locally, kustomize rewrites it.
DSH_IMAGES = {"dsh-pipeline:local", "dsh-pipeline"}
# Labels Prometheus adds to every scraped series, on top of the metric's own.
TARGET_LABELS = {"job", "instance", "namespace", "pod"}
# Tools are installed by the project's setup; the skip reason says how.
PROMTOOL_INSTALL = "apt-get install -y --no-install-recommends prometheus (provides promtool)"
COMPOSE_INSTALL = "apt-get install -y --no-install-recommends docker-compose (v1 validates offline)"


def _prefix(cls: type[StrictSettings]) -> str:
    prefix = cls.model_config.get("env_prefix")
    assert isinstance(prefix, str) and prefix
    return prefix


PREFIXES = {_prefix(cls): cls for cls in SETTINGS_CLASSES}


# --- loading ---------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def compose() -> dict[str, Any]:
    data = load_yaml(COMPOSE_FILE)
    assert isinstance(data, dict)
    return data


def compose_services() -> dict[str, dict[str, Any]]:
    services = compose()["services"]
    assert isinstance(services, dict)
    return services


def k8s_resource_files() -> list[Path]:
    kustomization = load_yaml(K8S / "kustomization.yaml")
    return [K8S / name for name in kustomization["resources"]]


def k8s_objects() -> list[dict[str, Any]]:
    return [doc for path in k8s_resource_files() for doc in load_yaml_all(path)]


def k8s_of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in k8s_objects() if doc["kind"] == kind]


def runs_serve(deployment: dict[str, Any]) -> bool:
    return bool(deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["serve"])


def pipeline_deployments() -> list[dict[str, Any]]:
    """The writer's and the projectors' Deployments: `dsh serve` probes its API's port."""
    return [d for d in k8s_of_kind("Deployment") if not runs_serve(d)]


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in k8s_objects():
        if doc["kind"] in ("Deployment", "Job"):
            yield f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"]


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def k8s_container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the pod would see it; secrets become placeholders."""
    configmaps = {c["metadata"]["name"]: c.get("data", {}) for c in k8s_of_kind("ConfigMap")}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        assert name in configmaps, f"envFrom names ConfigMap {name}, which no manifest defines"
        env.update({str(k): str(v) for k, v in configmaps[name].items()})
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "secretKeyRef" in item.get("valueFrom", {}):
            env[item["name"]] = "placeholder-secret"
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = "writer-5d9c7b8f4-x2x7q"
        else:
            raise AssertionError(f"unexpected env source {item}")
    return env


def environments() -> list[tuple[str, dict[str, str]]]:
    """Every process environment the manifests define, named for the failure message."""
    found = [
        (f"compose {name}", compose_env(service)) for name, service in compose_services().items()
    ]
    for where, spec in pod_specs():
        for container in spec["containers"]:
            found.append((f"k8s {where}/{container['name']}", k8s_container_env(container)))
    return found


# --- settings: the cross-check that matters --------------------------------------------------


@pytest.mark.parametrize(("where", "env"), [pytest.param(w, e, id=w) for w, e in environments()])
def test_every_dsh_variable_is_a_setting_its_class_accepts(
    where: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsh_vars = {k: v for k, v in env.items() if k.startswith("DSH_")}
    for name in dsh_vars:
        owners = [p for p in PREFIXES if name.startswith(p)]
        assert owners, f"{where}: {name} has no settings class (known: {sorted(PREFIXES)})"
        cls = PREFIXES[owners[0]]
        field = name[len(owners[0]) :].lower()
        assert field in cls.model_fields, (
            f"{where}: {name} is not a field of {cls.__name__}; known: {sorted(cls.model_fields)}"
        )
    # Build each settings class from exactly this environment, as the service would: that
    # also checks types and literals (security protocol, SASL mechanism, ports).
    for key in [k for k in os.environ if k.startswith("DSH_")]:
        monkeypatch.delenv(key)
    for key, value in dsh_vars.items():
        monkeypatch.setenv(key, value)
    for prefix, cls in PREFIXES.items():
        if any(k.startswith(prefix) for k in dsh_vars):
            cls()  # raises on an unknown name or a value the field refuses


def test_the_service_processes_get_the_settings_they_need() -> None:
    """Defaults that would be wrong in a deployment are overridden everywhere."""
    for where, env in environments():
        if "DSH_PROJECTOR_METRICS_PORT" in env or "projector" in where:
            # ProjectorSettings.metrics_port defaults to 0, which serves no /metrics at all.
            assert int(env.get("DSH_PROJECTOR_METRICS_PORT", "0")) > 0, where
        if "projector" in where or "writer" in where or "topics" in where:
            # The default points at the local stack's loopback broker.
            assert "DSH_KAFKA_BOOTSTRAP_SERVERS" in env, where
        if "projector" in where:
            assert "DSH_REDIS_URL" in env, where
        if "serve" in where:
            # The API appends over Kafka and reads from Redis; the default host, 127.0.0.1,
            # is unreachable from outside its container.
            assert {"DSH_KAFKA_BOOTSTRAP_SERVERS", "DSH_REDIS_URL"} <= env.keys(), where
            assert env["DSH_SERVE_HOST"] == "0.0.0.0", where
            # ServeSettings.metrics_port defaults to 0: no /metrics, nothing to scrape.
            assert int(env.get("DSH_SERVE_METRICS_PORT", "0")) > 0, where


def test_secrets_are_references_never_values() -> None:
    assert not k8s_of_kind("Secret"), "Secrets are created by hand (see kustomization.yaml)"
    instructions = (K8S / "kustomization.yaml").read_text()
    for _, spec in pod_specs():
        for container in spec["containers"]:
            for item in container.get("env", []):
                if re.search("PASSWORD|SECRET|TOKEN", item["name"]):
                    ref = item.get("valueFrom", {}).get("secretKeyRef")
                    assert ref, f"{item['name']} must come from a Secret"
                    # Whoever applies the kustomization is told how to create it.
                    assert f"create secret generic {ref['name']}" in instructions
                    assert f"{ref['key']}=" in instructions
            for volume in spec.get("volumes", []):
                if "secret" in volume:
                    assert f"create secret generic {volume['secret']['secretName']}" in (
                        instructions
                    )
    for configmap in k8s_of_kind("ConfigMap"):
        for key, value in configmap.get("data", {}).items():
            assert not re.search("PASSWORD|SECRET|TOKEN", key), key
            assert "@" not in str(value), f"{key}: credentials in a URL"


# --- the commands the containers run ----------------------------------------------------------


def _run_commands() -> list[tuple[str, list[str]]]:
    found = []
    for name, service in compose_services().items():
        if service.get("image") in DSH_IMAGES and "entrypoint" not in service:
            found.append((f"compose {name}", [str(a) for a in service["command"]]))
    for where, spec in pod_specs():
        for container in spec["containers"]:
            if "args" in container:
                found.append((f"k8s {where}", [str(a) for a in container["args"]]))
    return found


@pytest.mark.parametrize(("where", "argv"), [pytest.param(w, a, id=w) for w, a in _run_commands()])
def test_every_container_command_parses_with_the_real_cli(where: str, argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.command in ("writer", "project", "serve"), where


def test_each_projection_runs_in_compose_and_in_k8s() -> None:
    compose_projections = sorted(
        s["command"][1]
        for s in compose_services().values()
        if s.get("command", [""])[0] == "project"
    )
    k8s_projections = sorted(
        c["args"][1]
        for d in k8s_of_kind("Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if c.get("args", [""])[0] == "project"
    )
    assert compose_projections == k8s_projections == sorted(PROJECTIONS)


# --- metrics: alerts and dashboard query what the services export ----------------------------


def exported_metrics() -> dict[str, set[str]]:
    """Sample names the services expose, mapped to their label names."""
    found: dict[str, set[str]] = {}
    modules = (
        producers.writer.metrics,
        producers.client_metrics,
        projectors.metrics,
        serve.metrics,
    )
    for module in modules:
        for value in vars(module).values():
            if not isinstance(value, MetricWrapperBase):
                continue
            labels = set(value._labelnames)
            for metric in value.describe():
                suffixes = {
                    "counter": ("_total", "_created"),
                    "histogram": ("_bucket", "_sum", "_count", "_created"),
                    "gauge": ("",),
                }[metric.type]
                for suffix in suffixes:
                    found[metric.name + suffix] = labels | (
                        {"le"} if suffix == "_bucket" else set()
                    )
    return found


def alert_rules() -> list[dict[str, Any]]:
    groups = load_yaml(PROMETHEUS / "alerts.yml")["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    data = json.loads((GRAFANA / "dashboard.json").read_text())
    assert isinstance(data, dict)
    return data


def dashboard_panels() -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard()["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def queries() -> list[tuple[str, str]]:
    found = [(f"alert {r['alert']}", str(r["expr"])) for r in alert_rules()]
    for panel in dashboard_panels():
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r}", str(target["expr"])))
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"variable {variable['name']}", str(variable["definition"])))
    return found


SELECTOR = re.compile(r"\b(dsh_[a-z0-9_]+)\b(?:\{([^}]*)\})?")


def test_every_queried_metric_and_label_is_exported() -> None:
    exported = exported_metrics()
    used = set()
    for where, expr in queries():
        for name, matchers in SELECTOR.findall(expr):
            assert name in exported, f"{where}: {name} is not exported; known: {sorted(exported)}"
            used.add(name)
            for label in re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers):
                assert label in exported[name] | TARGET_LABELS, f"{where}: {name} has no {label}"
    # The dashboard covers what the design promises operators (DESIGN.md "Observability").
    for needed in (
        "dsh_writer_appends_total",
        "dsh_writer_append_latency_seconds_bucket",
        "dsh_writer_transaction_commit_seconds_bucket",
        "dsh_writer_partitions_owned",
        "dsh_projector_events_total",
        "dsh_projector_lag",
        "dsh_projector_blocked_sessions",
        "dsh_projector_dlq_total",
        "dsh_client_append_seconds_bucket",
        "dsh_serve_requests_total",
        "dsh_serve_request_seconds_bucket",
        "dsh_serve_open_streams",
    ):
        assert needed in used, f"nothing queries {needed}"


def test_label_values_in_queries_are_ones_the_code_emits() -> None:
    """`result` and `cause` values are strings in the projector runtime, not an enum."""
    runtime = "".join(p.read_text() for p in (ROOT / "projectors" / "runtime").glob("*.py"))
    for where, expr in queries():
        for label in ("result", "cause"):
            for match in re.finditer(label + r'\s*(?:=~|=|!=)\s*"([^"]*)"', expr):
                for value in match.group(1).split("|"):
                    assert f'"{value}"' in runtime, f"{where}: {label}={value} is never emitted"


def test_alerts_cover_what_operators_page_on() -> None:
    rules = {r["alert"]: r for r in alert_rules()}
    for rule in rules.values():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    expected = {
        "DshProjectorLagHigh": "dsh_projector_lag",
        "DshProjectorBlockedSessions": "dsh_projector_blocked_sessions",
        "DshProjectorDLQ": "dsh_projector_dlq_total",
        "DshWriterDLQ": "dsh_writer_dlq_total",
        "DshNoWriterOwnsPartitions": "dsh_writer_partitions_owned",
        "DshWriterWithoutPartitions": "dsh_writer_partitions_owned",
        "DshWriterTransactionCommitSlow": "dsh_writer_transaction_commit_seconds_bucket",
        "DshProjectorApplyErrors": "dsh_projector_events_total",
        "DshWriterCyclicGarbage": "dsh_writer_gc_cyclic_garbage_objects_total",
        "DshServeDown": 'up{job="dsh-serve"}',
        "DshServeServerErrors": "dsh_serve_requests_total",
    }
    for alert, metric in expected.items():
        assert metric in rules[alert]["expr"], alert


def test_alert_jobs_are_the_scrape_jobs() -> None:
    compose_jobs = {
        c["job_name"] for c in load_yaml(PROMETHEUS / "prometheus.yml")["scrape_configs"]
    }
    # In k8s the job is dsh-<app.kubernetes.io/component> of the pod (prometheus-k8s.yml).
    k8s_config = load_yaml(PROMETHEUS / "prometheus-k8s.yml")
    relabels = k8s_config["scrape_configs"][0]["relabel_configs"]
    assert {"target_label": "job", "replacement": "dsh-$1"}.items() <= next(
        r for r in relabels if r.get("target_label") == "job"
    ).items()
    k8s_jobs = {
        "dsh-" + d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        for d in k8s_of_kind("Deployment")
    }
    for rule in alert_rules():
        for job in re.findall(r'job="([^"]+)"', str(rule["expr"])):
            assert job in compose_jobs and job in k8s_jobs, f"{rule['alert']}: job {job}"


def test_compose_scrape_targets_are_compose_services_on_their_metrics_ports() -> None:
    services = compose_services()
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    assert config["rule_files"] == ["alerts.yml"]
    scraped = set()
    for job in config["scrape_configs"]:
        if not job["job_name"].startswith("dsh-"):
            continue
        for target in (t for sc in job["static_configs"] for t in sc["targets"]):
            host, port = target.rsplit(":", 1)
            assert host in services, f"{target}: no compose service {host}"
            env = compose_env(services[host])
            ports = {v for k, v in env.items() if k.endswith("_METRICS_PORT")}
            assert ports == {port}, f"{target}: the service serves /metrics on {ports}"
            scraped.add(host)
    running = {
        n
        for n, s in services.items()
        if s.get("command", [""])[0] in ("writer", "project", "serve")
    }
    assert scraped == running, "every writer, projector and dsh serve is scraped"


def test_k8s_scrape_annotations_match_the_metrics_port() -> None:
    """Every Deployment, `dsh serve`'s too, is scraped on the port its settings serve."""
    for doc in k8s_of_kind("Deployment"):
        template = doc["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        (container,) = template["spec"]["containers"]
        env = k8s_container_env(container)
        (port,) = [v for k, v in env.items() if k.endswith("_METRICS_PORT")]
        assert annotations["prometheus.io/port"] == port
        assert {"name": "metrics", "containerPort": int(port)} in container["ports"]


# --- Grafana ----------------------------------------------------------------------------------


def test_dashboard_is_well_formed_and_bound_to_the_provisioned_datasource() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard_panels()]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    datasources = load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yaml")
    (source,) = datasources["datasources"]
    (variable,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == source["type"] == "prometheus"
    assert variable["current"]["value"] == source["uid"]
    for panel in dashboard_panels():
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert panel["targets"], panel["title"]


def test_grafana_provisioning_points_at_the_mounted_dashboard() -> None:
    providers = load_yaml(GRAFANA / "provisioning" / "dashboards" / "dsh.yaml")["providers"]
    (provider,) = providers
    mounts = compose_services()["grafana"]["volumes"]
    dashboard_mount = next(m for m in mounts if m.startswith("../grafana/dashboard.json:"))
    target = dashboard_mount.split(":")[1]
    assert Path(target).parent == Path(provider["options"]["path"])
    url = load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yaml")["datasources"][0][
        "url"
    ]
    assert url == "http://prometheus:9090" and "prometheus" in compose_services()


# --- compose ----------------------------------------------------------------------------------


def test_compose_dependencies_exist_and_wait_for_health() -> None:
    services = compose_services()
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on with conditions"
        for other, condition in depends.items():
            assert other in services, f"{name} depends on unknown service {other}"
            wanted = condition["condition"]
            if wanted == "service_healthy":
                assert "healthcheck" in services[other], f"{other} has no healthcheck"
            elif wanted == "service_completed_successfully":
                assert services[other].get("restart") == "no", f"{other} must run once"
            else:
                raise AssertionError(f"{name} -> {other}: condition {wanted}")
        if service.get("restart") != "no":
            assert "healthcheck" in service, f"{name} has no healthcheck"


def test_compose_healthchecks_probe_the_port_the_service_serves() -> None:
    checked = 0
    for name, service in compose_services().items():
        probe = " ".join(service.get("healthcheck", {}).get("test", []))
        ports = {v for k, v in compose_env(service).items() if k.endswith("_METRICS_PORT")}
        if not ports:
            continue  # not one of ours
        if service.get("command") == ["serve"]:
            continue  # probed on its API's port: test_serve_runs_in_compose_and_k8s_probed_on_...
        for port, path in re.findall(r"127\.0\.0\.1:(\d+)(/\w+)", probe):
            assert ports == {port}, f"{name} probes {port} but serves /readyz on {ports}"
            # Healthy gates depends_on: it must mean ready, not merely "answers /metrics".
            assert path == "/readyz", f"{name} probes {path}"
            checked += 1
    assert checked == 5, "two writers and three projectors"


def test_compose_runs_two_writers_with_distinct_transactional_ids() -> None:
    writers = [s for s in compose_services().values() if s.get("command") == ["writer"]]
    ids = [compose_env(s)["DSH_WRITER_TRANSACTIONAL_ID"] for s in writers]
    assert len(writers) == 2 and len(set(ids)) == 2


def test_compose_kafka_is_a_single_node_that_can_run_transactions() -> None:
    env = compose_env(compose_services()["kafka"])
    # DESIGN.md: on one broker these must be 1, or init_transactions hangs.
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    image = compose_services()["kafka"]["image"]
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", image)


def test_compose_bind_mounts_exist() -> None:
    for name, service in compose_services().items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE_FILE.parent / source).exists(), f"{name}: {source}"
        build = service.get("build")
        if build:
            context = COMPOSE_FILE.parent / build["context"]
            assert (context / build["dockerfile"]).is_file(), name


def test_topic_jobs_create_partition_aligned_topics_with_the_right_replication() -> None:
    compose_env_ = compose_env(compose_services()["topics"])
    assert compose_env_["TOPIC_REPLICATION_FACTOR"] == "1"
    (job,) = k8s_of_kind("Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = k8s_container_env(container)
    # The external cluster: replication factor 3, min ISR 2 (DESIGN.md "Scaling out").
    assert env["TOPIC_REPLICATION_FACTOR"] == "3"
    assert env["TOPIC_MIN_INSYNC_REPLICAS"] == "2"
    assert int(env["TOPIC_PARTITIONS"]) >= 2
    # The module ships in the image (deploy.k8s is part of the package), so the job needs no
    # mounted script and always matches the image's topic specs.
    command = ["python", "-m", "deploy.k8s.create_topics"]
    assert container["command"] == command
    assert compose_services()["topics"]["entrypoint"] == command


def test_the_topics_job_makes_way_for_the_next_image() -> None:
    """A Job's pod template is immutable and every upgrade changes its image: unless the
    finished Job is gone by then, `kubectl apply -k` of the new tag fails. It is deleted a
    while after it ends (time to read its outcome), and docs/deploy.md says what an upgrade
    does."""
    (job,) = k8s_of_kind("Job")
    ttl_s = job["spec"].get("ttlSecondsAfterFinished")
    assert isinstance(ttl_s, int), "the finished Job would block every upgrade"
    assert 60 <= ttl_s <= 3600, ttl_s
    minutes = f"{ttl_s // 60} minutes"
    for text in ((K8S / "topics-job.yaml").read_text(), (ROOT / "docs" / "deploy.md").read_text()):
        assert minutes in text and "delete job topics" in text
    assert "Upgrading is the same `kubectl apply -k`" in (ROOT / "docs" / "deploy.md").read_text()


def test_create_topics_passes_the_job_environment_to_ensure_topics(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module("deploy.k8s.create_topics")
    calls: list[tuple[Any, ...]] = []

    def ensure_topics(
        kafka: KafkaSettings, partitions: int, rf: int, timeout_s: float
    ) -> list[str]:
        calls.append(("ensure", kafka.bootstrap_servers, partitions, rf))
        return [kafka.topic("events")]

    def set_min_isr(kafka: KafkaSettings, value: str, timeout_s: float) -> None:
        calls.append(("min_isr", value))

    monkeypatch.setattr(module, "ensure_topics", ensure_topics)
    monkeypatch.setattr(module, "set_min_insync_replicas", set_min_isr)
    monkeypatch.setenv("DSH_KAFKA_BOOTSTRAP_SERVERS", "kafka:9092")
    monkeypatch.setenv("TOPIC_PARTITIONS", "24")
    monkeypatch.setenv("TOPIC_REPLICATION_FACTOR", "3")
    monkeypatch.setenv("TOPIC_MIN_INSYNC_REPLICAS", "2")
    assert module.main() == 0
    assert calls == [("ensure", "kafka:9092", 24, 3), ("min_isr", "2")]
    out = capsys.readouterr().out
    assert "created dsh.session.events" in out
    assert all(f"dsh.session.{spec.name}" in out for spec in TOPICS)


# --- Kubernetes -------------------------------------------------------------------------------


def test_every_k8s_object_is_named_and_typed() -> None:
    for doc in k8s_objects():
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], doc


def test_pods_are_hardened_and_free_of_injected_dsh_variables() -> None:
    for where, spec in pod_specs():
        # Service links would inject e.g. DSH_WRITER_PORT for a Service named dsh-writer,
        # which the settings classes refuse as unknown.
        assert spec["enableServiceLinks"] is False, where
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["readOnlyRootFilesystem"] is True, where
            resources = container["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys(), where
            assert "memory" in resources["limits"], where
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{where}: a writable /tmp on a read-only root"
    for service in k8s_of_kind("Service"):
        # Even with links on, no Service name may turn into a DSH_<PREFIX>_ variable.
        env_name = service["metadata"]["name"].upper().replace("-", "_") + "_"
        assert not any(env_name.startswith(p) for p in PREFIXES), service["metadata"]["name"]


def test_deployments_probe_readyz_and_livez_and_have_budgets() -> None:
    deployments = k8s_of_kind("Deployment")
    budgets = {
        tuple(sorted(b["spec"]["selector"]["matchLabels"].items()))
        for b in k8s_of_kind("PodDisruptionBudget")
    }
    services = {tuple(sorted(s["spec"]["selector"].items())) for s in k8s_of_kind("Service")}
    for doc in deployments:
        name = doc["metadata"]["name"]
        selector = doc["spec"]["selector"]["matchLabels"]
        assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items(), name
        assert tuple(sorted(selector.items())) in budgets, f"{name} has no PodDisruptionBudget"
        assert tuple(sorted(selector.items())) in services, f"{name} has no metrics Service"
        if runs_serve(doc):
            continue  # its own probes: test_serve_runs_in_compose_and_k8s_probed_on_its_api_port
        for container in doc["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == "dsh-pipeline", name
            probes = {p: container[p]["httpGet"] for p in ("readinessProbe", "livenessProbe")}
            assert probes == {
                "readinessProbe": {"path": "/readyz", "port": "metrics"},
                "livenessProbe": {"path": "/livez", "port": "metrics"},
            }, name
    (writer,) = [
        d
        for d in deployments
        if d["spec"]["template"]["spec"]["containers"][0]["args"] == ["writer"]
    ]
    assert writer["spec"]["replicas"] == 2


def test_serve_runs_in_compose_and_k8s_probed_on_its_api_port() -> None:
    """`dsh serve` answers /livez and /readyz on the port it serves the API on (its settings'
    port); k8s probes both, and compose's health check (what depends_on waits for) is ready."""
    (deployment,) = [d for d in k8s_of_kind("Deployment") if runs_serve(d)]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    port = int(k8s_container_env(container)["DSH_SERVE_PORT"])
    assert {"name": "http", "containerPort": port} in container["ports"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    (service,) = [s for s in k8s_of_kind("Service") if s["metadata"]["name"] == "serve"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"].get("clusterIP") != "None", "clients reach the API through it"
    (serve,) = [s for s in compose_services().values() if s.get("command") == ["serve"]]
    compose_port = int(compose_env(serve).get("DSH_SERVE_PORT", ServeSettings().port))
    assert f"127.0.0.1:{compose_port}:{compose_port}" in serve["ports"]
    probe = " ".join(serve["healthcheck"]["test"])
    assert f"http://127.0.0.1:{compose_port}/readyz" in probe


def test_dsh_serve_stops_on_its_own_within_each_grace_period() -> None:
    """On SIGTERM `dsh serve` gives the requests in hand DSH_SERVE_SHUTDOWN_TIMEOUT_S, then
    closes its clients: the supervisor's grace period must leave room for both, or it kills
    the process mid-stop. In Kubernetes a preStop sleep comes first, inside the same grace
    period: uvicorn stops listening on SIGTERM, while kube-proxy and the Ingress still route
    to a terminating pod until they have heard of it."""
    margin_s = 5  # the streams' idle second, closing the Kafka clients
    (deployment,) = [d for d in k8s_of_kind("Deployment") if runs_serve(d)]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    assert command and command[0] == "sleep", "serve keeps serving while it leaves endpoints"
    sleep_s = int(command[1])
    assert 3 <= sleep_s <= 15, sleep_s
    # The hook runs in the image: Debian's coreutils (python:*-slim) have /bin/sleep.
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    runtime_base = re.findall(r"^FROM (\S+)", dockerfile, flags=re.M)[-1]
    assert re.fullmatch(r"python:[\d.]+-slim", runtime_base), runtime_base
    env = k8s_container_env(container)
    timeout_s = int(env.get("DSH_SERVE_SHUTDOWN_TIMEOUT_S", ServeSettings().shutdown_timeout_s))
    assert sleep_s + timeout_s + margin_s <= spec["terminationGracePeriodSeconds"]
    (serve,) = [s for s in compose_services().values() if s.get("command") == ["serve"]]
    env = compose_env(serve)
    timeout_s = int(env.get("DSH_SERVE_SHUTDOWN_TIMEOUT_S", ServeSettings().shutdown_timeout_s))
    grace = serve["stop_grace_period"]
    assert grace.endswith("s") and timeout_s + margin_s <= int(grace[:-1]), grace


def test_a_static_group_member_is_named_only_where_names_survive_a_replacement() -> None:
    """Static membership (``group.instance.id``) from the pod name: a static member never
    leaves its group, so its partitions wait out its session until a process with the same
    id joins. A Deployment renames its pods on every rollout, so only a StatefulSet's pod
    name may be one. The writer's pod name is its transactional id, not a member id: a
    clean stop settles its transaction, and a dead writer's is fenced by the next owner."""
    with_templates = [d for d in k8s_objects() if "template" in d.get("spec", {})]
    assert {d["kind"] for d in with_templates} >= {"Deployment", "Job"}
    for doc in with_templates:
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for item in container.get("env", []):
                field = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                if item["name"].endswith("_INSTANCE_ID") and field == "metadata.name":
                    assert doc["kind"] == "StatefulSet", (
                        f"{doc['kind']}/{doc['metadata']['name']}: {item['name']} from a pod "
                        "name that changes on every rollout"
                    )
            # Nor a fixed id: a Deployment's replicas would share it and take turns.
            if doc["kind"] == "Deployment":
                assert not [n for n in k8s_container_env(container) if n.endswith("_INSTANCE_ID")]


@pytest.fixture(scope="module")
def kustomized() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def test_kustomize_builds_namespaced_objects_with_the_image_rewritten(
    kustomized: list[dict[str, Any]],
) -> None:
    kinds = sorted({d["kind"] for d in kustomized})
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Job",
        "Namespace",
        "PodDisruptionBudget",
        "Service",
    ]
    for doc in kustomized:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "dsh", doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "dsh-pipeline"
    images = {
        c["image"]
        for d in kustomized
        if d["kind"] in ("Deployment", "Job")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"dsh-pipeline:0.1.0"}


def test_kustomized_objects_pass_the_kubernetes_schemas(
    kustomized: list[dict[str, Any]],
) -> None:
    validator = pytest.importorskip(
        "kubernetes_validate", reason="pip install kubernetes-validate (offline k8s schemas)"
    )
    for doc in kustomized:
        # strict: unknown fields (a misspelt probe key) are errors, not silently dropped.
        validator.validate(doc, "1.32.0", strict=True)


# --- external validators ----------------------------------------------------------------------


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(f"promtool is not installed: {PROMTOOL_INSTALL}")
    return promtool


def _run(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_accepts_the_compose_config_and_the_rules() -> None:
    promtool = _promtool()
    for argv in (
        [promtool, "check", "config", "prometheus.yml"],
        [promtool, "check", "rules", "alerts.yml"],
    ):
        result = _run(argv, cwd=PROMETHEUS)
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_k8s_config() -> None:
    result = _run([_promtool(), "check", "config", "prometheus-k8s.yml"], cwd=PROMETHEUS)
    if "field kubernetes_sd_configs not found" in result.stdout + result.stderr:
        # Debian builds Prometheus without Kubernetes service discovery.
        pytest.skip("this promtool has no kubernetes_sd_configs (Debian build)")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rule_unit_tests_pass() -> None:
    result = _run([_promtool(), "test", "rules", "alerts_test.yml"], cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_file_validates() -> None:
    docker = shutil.which("docker")
    if docker and _run([docker, "compose", "version"]).returncode == 0:
        argv = [docker, "compose"]
    elif shutil.which("docker-compose"):
        argv = ["docker-compose"]
    else:
        pytest.skip(f"no compose validator: {COMPOSE_INSTALL}")
    # `config` resolves and validates the file against the compose schema; no engine needed.
    result = _run([*argv, "-f", str(COMPOSE_FILE), "config", "-q"])
    assert result.returncode == 0, result.stdout + result.stderr


# --- the image ---------------------------------------------------------------------------------


def test_dockerfile_builds_a_non_root_dsh_image_from_every_package() -> None:
    lines = [
        line.strip()
        for line in (DEPLOY / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert froms and all(f == "python:3.11-slim" for f in froms)
    (user,) = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    assert 'ENTRYPOINT ["dsh"]' in lines
    copied = {
        line.split()[1] for line in lines if line.startswith("COPY ") and "--from" not in line
    }
    pyproject = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r"include = \[([^\]]*)\]", pyproject)
    assert packages is not None
    for pattern in re.findall(r'"(\w+)\*"', packages.group(1)):
        assert pattern in copied, f"package {pattern} is not copied into the image"
        assert (ROOT / pattern).is_dir()
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".state", ".git"} <= ignored
    assert not ignored & copied, "the image needs what .dockerignore leaves out"
    assert "deploy/k8s" not in ignored, "the topic job runs deploy.k8s.create_topics"
