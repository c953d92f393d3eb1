"""The tools example as the tools guide runs it: its exact `parley demo` command (a private
redis-server, a worker offering examples/tools/incident_tools.py, a coordinator), from the
checkout, offline; what it prints is what the guide shows."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parley.processes import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("redis-server") is None,
                                                  reason="the demo starts a redis-server")]

REPO = Path(__file__).parents[2]
GUIDE = REPO / "docs" / "guides" / "tools.md"


def guide_example() -> tuple[str, list[str]]:
    """The tools guide's example: its command (continuation lines joined) and the lines
    it shows the command printing."""
    block = re.search(r"```console\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    assert block, "the tools guide shows no console example"
    lines = block.group(1).splitlines()
    command = lines[0].removeprefix("$ ")
    while command.endswith("\\"):
        command = command[:-1] + lines.pop(1).strip()
    return command, lines[1:]


def test_the_tools_guides_example_runs_offline_and_prints_what_the_guide_shows(tmp_path):
    command, shown = guide_example()
    words = shlex.split(command)
    assignments = dict(word.split("=", 1) for word in words if re.match(r"^[A-Z_]+=", word))
    args = [word for word in words if not re.match(r"^[A-Z_]+=", word)]
    assert args[0] == "parley" and assignments == {
        "PARLEY_WORKER_TOOLS": "examples.tools.incident_tools"}
    (tmp_path / "tmp").mkdir()
    # No Redis answers there: the demo starts its own. The shell's PARLEY_WORKER_TOOLS
    # reaches the demo's worker through the environment, as it does at a terminal.
    env = {**os.environ, **assignments, "TMPDIR": str(tmp_path / "tmp"), "COLUMNS": "200",
           "PARLEY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "PARLEY_BROKER_URL": ""}
    # A fresh shell, in the checkout: parley and examples.tools import from it (the demo's
    # worker runs as ``python -m parley worker`` there).
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                         timeout=180, env=env, cwd=REPO)

    assert run.returncode == 0, run.stdout + run.stderr
    printed = run.stdout.splitlines()
    assert [line for line in printed if line in shown] == shown, run.stdout


def test_the_demo_says_in_one_line_why_its_worker_could_not_offer_the_tools(tmp_path):
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "PARLEY_WORKER_TOOLS": "examples.tools.no_such_module",
           "TMPDIR": str(tmp_path / "tmp"), "PARLEY_BROKER_URL": "",
           "PARLEY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    run = subprocess.run([sys.executable, "-m", "parley", "demo", "--spec",
                          "examples/rooms/tools.yaml"], capture_output=True, text=True,
                         timeout=180, env=env, cwd=REPO)

    assert run.returncode == 2
    assert run.stderr == (
        "parley: the demo's worker stopped (exit code 2): parley: PARLEY_WORKER_TOOLS: cannot "
        "import examples.tools.no_such_module: ModuleNotFoundError: No module named "
        "'examples.tools.no_such_module'\n")
