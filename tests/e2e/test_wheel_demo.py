"""The wheel the image installs, built from the image's build context alone and installed
with its dependencies into a new virtualenv, runs ``parley demo`` from a directory outside
the repository: no repository file is on the path, so its Lua scripts, prompt templates and
demo room must all come with the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parley.processes import free_port
from tests.support.deploy_files import ROOT, dev_tool, dockerfile_sources

# The repository's folders and the packages they hold: coordinator/, workers/ and shared/
# are parley.coordinator, parley.workers and parley.shared.
PACKAGES = {"parley": "parley", "coordinator": "parley/coordinator", "workers": "parley/workers",
            "shared": "parley/shared"}
# Building the wheel takes most of the time: about 30 s in all with uv's cache warm.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def run(args: list[object], cwd: Path, env: dict[str, str] | None = None,
        timeout_s: float = 300) -> str:
    """Run a command; fail with its output when it fails."""
    result = subprocess.run([str(arg) for arg in args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout_s)
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def clean_environment() -> dict[str, str]:
    """This process's environment without anything that points into the repository or
    its virtualenv, nor parley's settings."""
    return {name: value for name, value in os.environ.items()
            if name not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
            and not name.startswith("PARLEY_")}


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built as the Dockerfile builds it: from a copy of its build context."""
    context = tmp_path / "context"
    for source in dockerfile_sources():
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            context.mkdir(exist_ok=True)
            shutil.copy(origin, context / source)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", tmp_path / "dist",
         context], cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("parley-*.whl")
    return wheel


def data_files() -> list[str]:
    """The packages' files that are not Python (Lua scripts, prompt templates, the demo
    room, static files), relative to the repository: each must be in the wheel."""
    return sorted(str(installed / path.relative_to(ROOT / folder))
                  for folder, installed in PACKAGES.items()
                  for path in (ROOT / folder).rglob("*")
                  if path.is_file() and path.suffix not in {".py", ".pyc"}
                  and "__pycache__" not in path.parts)


def test_the_wheel_runs_the_demo_in_a_clean_virtualenv(tmp_path):
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    env = clean_environment()
    # uv, not pip: the same virtualenv and the dependencies from the same registry (through
    # uv's cache), in seconds rather than a minute.
    uv = dev_tool("uv")
    run([uv, "venv", "--quiet", "--python", sys.executable, venv], cwd=tmp_path, env=env)
    python, parley = venv / "bin" / "python", venv / "bin" / "parley"
    run([uv, "pip", "install", "--quiet", "--python", python, wheel], cwd=tmp_path, env=env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    modules = ", ".join(installed.replace("/", ".") for installed in PACKAGES.values())
    where = run([python, "-c", f"import {modules}; print(parley.__file__)"], cwd=elsewhere, env=env)
    site_packages = Path(where).parents[1]
    assert site_packages.is_relative_to(venv), where
    # One import name, as the distribution's: nothing else at the top of site-packages.
    (dist_info,) = site_packages.glob("parley-*.dist-info")
    installed_top = {line.split("/")[0].split(",")[0] for line in
                     (dist_info / "RECORD").read_text().splitlines()}
    assert installed_top - {dist_info.name, "..", "bin"} == {"parley"}, installed_top
    missing = [name for name in data_files() if not (site_packages / name).exists()]
    assert not missing, f"not in the wheel (pyproject.toml's package-data): {missing}"
    version = run([parley, "--version"], cwd=elsewhere, env=env)
    assert version.startswith("parley ") and "unknown" not in version

    # Nothing answers on this port: the demo starts a private redis-server of its own.
    env["PARLEY_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    shown = run([parley, "demo"], cwd=elsewhere, env={**env, "COLUMNS": "200"}, timeout_s=180)
    assert "launch-panel" in shown
    assert "Then rehearse the migration on a snapshot this week, and ship Monday." in shown
    assert not any(elsewhere.iterdir())  # it wrote nothing where it ran
