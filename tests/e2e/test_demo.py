"""``parley demo`` as a new user runs it, with real processes (a private redis-server, a
worker and a coordinator): it names each turn's bids and why the run stopped, in words,
and leaves no folder behind unless asked to keep its logs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parley.processes import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("redis-server") is None,
                                                  reason="the demo starts a redis-server")]

REPO = Path(__file__).parents[2]
DEMO_SPEC = REPO / "examples" / "rooms" / "demo.yaml"


def demo(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``parley demo`` on a Redis URL nothing answers (so it starts its own), with its
    temporary folders under ``tmp``."""
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "COLUMNS": "200",
           "PARLEY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "PARLEY_BROKER_URL": ""}
    return subprocess.run([sys.executable, "-m", "parley", "demo", "--spec", str(DEMO_SPEC),
                           *args], capture_output=True, text=True, timeout=180, env=env,
                          cwd=REPO)


def test_the_demo_names_the_bids_and_the_stop_and_leaves_no_folder(tmp_path):
    run = demo(tmp_path / "tmp")

    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert re.search(r"^no Redis answers at redis://127\.0\.0\.1:\d+/0 \(PARLEY_REDIS_URL\): "
                     r"started a private redis-server on 127\.0\.0\.1:\d+, stopped at the end$",
                     out, re.MULTILINE), out
    assert "bids: Optimist 0.60, Skeptic 0.80, Economist silent, Ethicist failed (scripted)" in out
    assert "Skeptic 0.75→0.45 (recency)" in out
    assert "tie at 0.80: Skeptic is listed before Ethicist" in out
    assert "Ethicist unparsed (no_tool_call)" in out
    assert "stopped by lull: no bid cleared the 0.5 threshold" in out
    assert "next:" not in out  # its private Redis, and the room with it, are gone
    assert list((tmp_path / "tmp").iterdir()) == []


def test_keep_logs_keeps_the_folder_and_names_it(tmp_path):
    run = demo(tmp_path / "tmp", "--keep-logs")

    assert run.returncode == 0, run.stdout + run.stderr
    kept = re.search(r"logs kept in (\S+)", run.stdout)
    assert kept, run.stdout
    folder = Path(kept.group(1))
    assert folder.parent == tmp_path / "tmp"
    assert {"worker.log", "coordinator.log", "redis.log"} <= {p.name for p in folder.iterdir()}
