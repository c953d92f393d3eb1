"""What the deploy files ask of the processes, asked of real ones: each coordinator, worker
and api is started with the environment and arguments compose and Kubernetes give it (its
port moved to a free one), then compose's health check must pass and the Kubernetes probes
must answer."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from typing import Any

import pytest

from parley.processes import free_port
from tests.support.deploy_files import compose_config, container, deployments, rendered
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return compose_config()["services"]


def passes(command: list[str]) -> bool:
    """True when a health check's command exits 0."""
    return subprocess.run(command, capture_output=True, timeout=30).returncode == 0


def answers(port: int, path: str) -> int:
    """The HTTP status of GET ``path`` on the local ``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def moved(arguments: list[str], old_port: str, port: int) -> list[str]:
    """``arguments`` with the deploy files' port replaced by ``port``."""
    return [argument.replace(old_port, str(port)) for argument in arguments]


@pytest.mark.parametrize("name", ["coordinator", "worker"])
def test_compose_checks_and_kubernetes_probes_pass_on_the_health_port(name, services,
                                                                       processes, queue):
    service = services[name]
    old_port = service["environment"]["PARLEY_HEALTH_PORT"]
    port = free_port()
    env = {"PARLEY_HEALTH_HOST": service["environment"]["PARLEY_HEALTH_HOST"],
           "PARLEY_HEALTH_PORT": str(port)}
    if name == "coordinator":
        processes.coordinator(env=env)
    else:
        processes.worker("--queues", queue, env=env)

    check = moved(service["healthcheck"]["test"], old_port, port)
    assert check[:2] == ["CMD", "parley"]
    command = [sys.executable, "-m", "parley", *check[2:]]
    wait_until(lambda: passes(command), 60, f"compose's health check of the {name}", every_s=0.5)
    box = container(deployments(rendered("base"))[name])
    assert str(port) != old_port and box["ports"][0]["containerPort"] == int(old_port)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert answers(port, box[probe]["httpGet"]["path"]) == 200, probe
    scraped = deployments(rendered("base"))[name]["spec"]["template"]["metadata"]["annotations"]
    assert answers(port, scraped["prometheus.io/path"]) == 200


def test_the_api_started_as_the_deploy_files_start_it_is_healthy(services, processes):
    box = container(deployments(rendered("base"))["api"])
    old_port = str(box["ports"][0]["containerPort"])
    port = free_port()
    assert moved(services["api"]["command"], old_port, port) == moved(box["args"], old_port, port)
    processes.api(*moved(box["args"], old_port, port)[1:], env={"PARLEY_API_TOKENS": "t0ken"})

    check = moved(services["api"]["healthcheck"]["test"], old_port, port)
    assert check[:2] == ["CMD", "python"]
    wait_until(lambda: passes([sys.executable, *check[2:]]), 60, "compose's health check of the api",
               every_s=0.5)
    assert answers(port, box["readinessProbe"]["httpGet"]["path"]) == 200
    with socket.create_connection(("127.0.0.1", port), timeout=5):  # the liveness probe
        pass
