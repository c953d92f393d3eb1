"""The deploy files as Docker and Kubernetes read them, offline: `docker compose config` by
the Compose v2 binary, `kubectl kustomize`, and the Kubernetes API schemas
(kubernetes-validate). The dev extra installs all three; a test skips only without them."""

from __future__ import annotations

import os
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from parley.shared.models import BidPolicy, MentionPolicy, RoundtablePolicy, SelectorPolicy
from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.settings import DEFAULT_WORKER_KEY_ENVS
from tests.support.deploy_files import (
    K8S,
    ROOT,
    compose_binary,
    compose_config,
    container,
    deployments,
    dev_tool,
    dockerfile_sources,
    final_stage,
    of_kind,
    rendered,
    run,
)

# The Kubernetes releases the manifests are checked against: one older clusters still run,
# and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
# The floor policies' longest default deadline of one call; a room may set longer ones, up
# to the visibility timeout (shared/settings.py).
LONGEST_DEFAULT_TIMEOUT_S = max(
    field.default for policy in (BidPolicy, SelectorPolicy, RoundtablePolicy, MentionPolicy)
    for name, field in policy.model_fields.items() if name.endswith("timeout_s"))


# ---------------------------------------------------------------- the image


def test_the_build_context_is_what_the_dockerfile_copies():
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]

    assert rules[0] == "*"  # everything else (.venv, .git, caches, keys) stays out
    let_in = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    assert let_in == dockerfile_sources()
    assert {"pyproject.toml", "parley", "shared", "workers", "coordinator"} <= let_in


def test_the_image_runs_parley_as_a_numeric_non_root_user():
    stage = final_stage()
    values = {command.cmd: command.value for command in stage}
    env = dict(pair for command in stage if command.cmd == "ENV"
               for pair in zip(command.value[::2], command.value[1::2], strict=True))

    uid, gid = values["USER"][0].split(":")
    assert int(uid) > 0 and int(gid) > 0  # numeric, so runAsNonRoot can check it
    assert values["ENTRYPOINT"] == ("parley",)
    assert ("parley --version",) in [c.value for c in stage if c.cmd == "RUN"]
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


# ---------------------------------------------------------------- compose


def test_docker_compose_config_passes_with_the_binary_as_the_docker_cli_plugin(tmp_path):
    plugins = tmp_path / "cli-plugins"
    plugins.mkdir()
    (plugins / "docker-compose").symlink_to(compose_binary())

    # `docker compose` finds its plugin under DOCKER_CONFIG; no engine is asked.
    run([dev_tool("docker"), "compose", "config", "--quiet"],
        env={**os.environ, "DOCKER_CONFIG": str(tmp_path)})


def seconds(duration: str) -> float:
    """A Go duration as compose prints it (``5m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(float(number) * units[unit] for number, unit in parts)


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return compose_config("--env-file", os.devnull)["services"]


def test_compose_starts_parley_once_redis_is_healthy_and_keeps_an_append_only_file(services):
    assert {"redis", "coordinator", "worker", "api"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    assert services["redis"]["healthcheck"]["test"][:2] == ["CMD", "redis-cli"]
    for name in ("coordinator", "worker", "api"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["rabbitmq"]["required"] is False


def test_compose_health_checks_ask_each_process_for_readiness_on_its_own_port(services):
    for name in ("coordinator", "worker"):
        test = services[name]["healthcheck"]["test"]
        port = services[name]["environment"]["PARLEY_HEALTH_PORT"]
        assert test[:4] == ["CMD", "parley", "health", "--ready"], name
        assert test[test.index("--port") + 1] == port, name
        assert services[name]["environment"]["PARLEY_HEALTH_HOST"] == "0.0.0.0"
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])


def test_compose_workers_outlast_the_longest_bid_timeout(services):
    worker = services["worker"]
    visibility_s = float(worker["environment"]["PARLEY_TASK_VISIBILITY_TIMEOUT_S"])

    # No room's bid timeout may exceed the visibility timeout: the grace covers them all.
    assert visibility_s > LONGEST_DEFAULT_TIMEOUT_S
    assert seconds(worker["stop_grace_period"]) > visibility_s
    assert seconds(services["coordinator"]["stop_grace_period"]) > 10  # Docker's default


def test_compose_passes_provider_keys_from_the_shell_and_a_file_to_workers_only(tmp_path):
    keys_file = tmp_path / "keys.env"
    keys_file.write_text("ANTHROPIC_API_KEY=from-the-file\n")

    found = compose_config("--env-file", os.devnull, env={
        "OPENAI_API_KEY": "from-the-shell", "PARLEY_PROVIDER_KEYS_FILE": str(keys_file)})

    worker = found["services"]["worker"]["environment"]
    assert worker["OPENAI_API_KEY"] == "from-the-shell"
    assert worker["ANTHROPIC_API_KEY"] == "from-the-file"
    assert "GROQ_API_KEY" not in worker  # not set anywhere: not set to ""
    for name in ("coordinator", "api"):
        assert not set(found["services"][name]["environment"]) & set(DEFAULT_WORKER_KEY_ENVS)


def test_compose_passes_every_default_key_variable_through():
    names = [line.strip() for line in
             (ROOT / "deploy/compose/provider-key-names.env").read_text().splitlines()
             if line.strip() and not line.startswith("#")]

    assert sorted(names) == sorted(DEFAULT_WORKER_KEY_ENVS)


def test_the_rabbitmq_env_file_starts_rabbitmq_and_switches_the_broker():
    found = compose_config("--env-file", ROOT / "deploy/compose/rabbitmq.env")["services"]

    assert found["rabbitmq"]["healthcheck"]["test"][:2] == ["CMD", "rabbitmq-diagnostics"]
    for name in ("coordinator", "worker", "api"):
        assert found[name]["environment"]["PARLEY_BROKER_URL"].startswith("amqp://parley:")
        assert "@rabbitmq:5672" in found[name]["environment"]["PARLEY_BROKER_URL"]
    assert "flower" not in found


def test_the_ops_profile_adds_flower_on_the_same_broker(services):
    found = compose_config("--env-file", os.devnull, "--profile", "ops")["services"]

    assert "flower" not in services and "rabbitmq" not in services
    assert found["flower"]["environment"]["CELERY_BROKER_URL"] == "redis://redis:6379/0"
    # Flower turns the workers' task events on by remote control: they need their heartbeats.
    assert "--no-task-events" not in found["worker"]["command"]
    assert "PARLEY_WORKER_TASK_EVENTS" not in found["worker"]["environment"]


def test_the_tracing_env_file_runs_jaeger_and_sends_every_processs_traces_there(services):
    found = compose_config("--env-file", ROOT / "deploy/compose/tracing.env")["services"]

    assert "jaeger" not in services
    assert services["worker"]["environment"]["PARLEY_TRACING"] == "off"
    assert found["jaeger"]["ports"][0]["published"] == "16686"
    for name in ("coordinator", "worker", "api"):
        environment = found[name]["environment"]
        assert environment["PARLEY_TRACING"] == "otlp"
        assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"


# ---------------------------------------------------------------- kubernetes


@pytest.fixture(params=["base", "keda"])
def manifests(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return rendered(request.param)


def test_the_manifests_match_the_kubernetes_schemas(manifests):
    for document in manifests:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                # KEDA's resources: their schemas come with KEDA (checked below by hand).
                assert document["apiVersion"].startswith("keda.sh/"), document["kind"]


def test_every_deployment_has_probes_on_its_health_port_and_bounded_memory(manifests):
    found = deployments(manifests)
    assert set(found) == {"coordinator", "worker", "api"}
    # Liveness never asks for Redis (an outage must not restart every pod); readiness does.
    liveness = {"coordinator": {"httpGet": {"path": "/livez", "port": "health"}},
                "worker": {"httpGet": {"path": "/livez", "port": "health"}},
                "api": {"tcpSocket": {"port": "http"}}}
    readiness = {"coordinator": {"path": "/readyz", "port": "health"},
                 "worker": {"path": "/readyz", "port": "health"},
                 "api": {"path": "/healthz", "port": "http"}}
    for name, deployment in found.items():
        box = container(deployment)
        env = {item["name"]: item for item in box.get("env", [])}
        (port,) = box["ports"]
        probe = {key: box["livenessProbe"][key] for key in ("httpGet", "tcpSocket")
                 if key in box["livenessProbe"]}
        assert probe == liveness[name], name
        assert box["readinessProbe"]["httpGet"] == readiness[name], name
        if name != "api":
            assert env["PARLEY_HEALTH_PORT"]["value"] == str(port["containerPort"])
            scraped = deployment["spec"]["template"]["metadata"]["annotations"]
            assert scraped["prometheus.io/port"] == str(port["containerPort"])
        assert {"cpu", "memory"} <= set(box["resources"]["requests"])
        assert "memory" in box["resources"]["limits"]
        assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]


def test_every_pod_reads_the_settings_config_map(manifests):
    (config_map,) = of_kind(manifests, "ConfigMap")
    assert config_map["data"]["PARLEY_HEALTH_HOST"] == "0.0.0.0"
    for deployment in of_kind(manifests, "Deployment"):
        refs = [source["configMapRef"]["name"] for source in container(deployment)["envFrom"]
                if "configMapRef" in source]
        assert refs == [config_map["metadata"]["name"]]


def test_workers_outlast_the_longest_bid_timeout_on_kubernetes_too(manifests):
    (config_map,) = of_kind(manifests, "ConfigMap")
    visibility_s = float(config_map["data"]["PARLEY_TASK_VISIBILITY_TIMEOUT_S"])
    worker = deployments(manifests)["worker"]["spec"]["template"]["spec"]

    assert visibility_s > LONGEST_DEFAULT_TIMEOUT_S
    assert worker["terminationGracePeriodSeconds"] > visibility_s


def test_the_image_is_the_package_version_pulled_only_when_absent(manifests):
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(),
                        re.MULTILINE).group(1)
    for deployment in of_kind(manifests, "Deployment"):
        assert container(deployment)["image"] == f"parley:{version}"
        assert container(deployment)["imagePullPolicy"] == "IfNotPresent"


def test_every_deployment_has_a_disruption_budget(manifests):
    budgets = [b["spec"]["selector"]["matchLabels"]
               for b in of_kind(manifests, "PodDisruptionBudget")]
    for deployment in of_kind(manifests, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert any(selector.items() <= labels.items() for selector in budgets)


def example_secrets() -> dict[str, dict[str, str]]:
    documents = yaml.safe_load_all((K8S / "secret.example.yaml").read_text())
    return {d["metadata"]["name"]: d["stringData"] for d in documents}


def test_secrets_are_references_to_keys_of_the_example_with_placeholders(manifests):
    examples = example_secrets()
    assert not list(of_kind(manifests, "Secret"))
    for deployment in of_kind(manifests, "Deployment"):
        box = container(deployment)
        for item in box.get("env", []):
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref and not ref.get("optional"):
                assert ref["key"] in examples[ref["name"]], ref
        for source in box["envFrom"]:
            if "secretRef" in source:
                assert source["secretRef"]["name"] in examples
    for values in examples.values():
        assert all("<" in value for value in values.values())  # placeholders only


def test_keda_scales_the_worker_deployment_on_the_queue_it_serves():
    manifests = rendered("keda")
    (scaler,) = of_kind(manifests, "ScaledObject")
    assert not list(of_kind(rendered("base"), "ScaledObject"))  # the base needs no KEDA
    worker = deployments(manifests)["worker"]
    args = container(worker)["args"]
    (trigger,) = scaler["spec"]["triggers"]
    (auth,) = of_kind(manifests, "TriggerAuthentication")

    assert scaler["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert trigger["type"] == "redis"
    assert trigger["metadata"]["listName"] == args[args.index("--queues") + 1] == DEFAULT_QUEUE
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    examples = example_secrets()
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["key"] in examples[ref["name"]]
