"""The tutorial (docs/getting-started/tutorial.md) as a reader runs it: its shell blocks in
order, against real processes, offline. A block marked `<!-- tutorial: processes -->` holds
long-running commands, one per line, each started as its own process (a second `parley
worker` replaces the first, as the page tells the reader to restart it); a block marked
`<!-- tutorial: needs a provider key -->` is skipped; every other `sh` block runs whole in
bash and must exit 0."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from parley.client import Client
from parley.processes import ProcessGroup, free_port, stop
from parley.shared.settings import Settings
from tests.support.api import api_answers
from tests.support.polling import wait_until

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "getting-started" / "tutorial.md"
BLOCK = re.compile(r"(?:<!-- tutorial: (?P<mark>[^>]+?) -->\n)?```sh\n(?P<body>.*?)```", re.S)
DOCUMENTED_API = "127.0.0.1:8700"
# What each block's output shows, by a command the block holds: the page says so.
SHOWN = {
    "parley run examples/rooms/demo.yaml": ["stopped by lull"],
    "parley transcript launch": ["Ann: Should we launch the beta next week?"],
    "parley run standup.yaml": ["lead", "Ship on Monday"],
    "parley run oncall.yaml": ["last_deploy", "checkout shipped v2.14.0"],
    "curl -s": ['"launch"'],
}


def blocks() -> list[tuple[str, str]]:
    """(mark, body) of each sh block, in page order; mark is '' for a plain block."""
    return [(found["mark"] or "", found["body"]) for found in BLOCK.finditer(TUTORIAL.read_text())]


def test_the_tutorial_has_blocks_of_each_kind():
    marks = [mark for mark, _ in blocks()]
    assert {"", "processes", "needs a provider key"} == set(marks)
    assert all(any(command in body for _, body in blocks()) for command in SHOWN)


def start_line(group: ProcessGroup, line: str, workdir: Path, api_port: int,
               running: dict[str, subprocess.Popen[bytes]]) -> tuple[str, subprocess.Popen[bytes]]:
    """Start one process line `[NAME=value ...] parley KIND [args]`, stopping the one of its
    kind already running (the page restarts it); the kind and the process."""
    words = shlex.split(line)
    env = {}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if env.get("PYTHONPATH") == ".":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(workdir), os.environ.get("PYTHONPATH")]))
    assert words[0] == "parley", line
    kind, extra = words[1], words[2:]
    env |= {"PARLEY_API_PORT": str(api_port)} if kind == "api" else {}
    if kind in running:
        stop(running.pop(kind))
    return kind, getattr(group, kind)(*extra, env=env)


def test_the_tutorial_runs_as_written(processes: ProcessGroup, tmp_path: Path, settings: Settings,
                                      monkeypatch: pytest.MonkeyPatch):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(workdir)  # the processes start here too, as in the reader's terminal
    api_port = free_port()
    client = Client(settings)
    env = {**os.environ, **processes.env,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    running: dict[str, subprocess.Popen[bytes]] = {}
    for mark, body in blocks():
        if mark == "needs a provider key":
            continue
        if mark == "processes":
            for line in filter(None, map(str.strip, body.splitlines())):
                kind, process = start_line(processes, line, workdir, api_port, running)
                running[kind] = process
                if "PARLEY_WORKER_TOOLS=" in line:
                    wait_until(lambda: client.tool_catalog(), 60, "the worker's tools offered")
                elif kind == "worker":
                    wait_until(lambda: client.tool_workers(), 60, "a live worker")
                elif kind == "api":
                    wait_until(lambda: api_answers(f"http://127.0.0.1:{api_port}"), 60, "the API")
            continue
        script = body.replace(DOCUMENTED_API, f"127.0.0.1:{api_port}")
        done = subprocess.run(["bash", "-e", "-c", script], env=env, cwd=workdir,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{body}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        for command, shown in SHOWN.items():
            if command in body:
                missing = [text for text in shown if text not in done.stdout]
                assert missing == [], f"{command}: {missing} not in\n{done.stdout}"
    assert json.loads(urllib.request.urlopen(f"http://127.0.0.1:{api_port}/rooms/launch",
                                             timeout=10).read())["room"] == "launch"

