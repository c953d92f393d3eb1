"""Stopping a group of processes: all are asked at once, each by its PID."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from parley.processes import stop_together
from tests.support.polling import wait_until

# On SIGTERM it writes its own file, then exits only once its partner's file exists: a
# pair of them exits cleanly only if both were sent SIGTERM before either had exited.
PARTNER = """
import os, signal, sys, time
mine, partner = sys.argv[1:]
def on_term(signum, frame):
    open(mine, "w").close()
    while not os.path.exists(partner):
        time.sleep(0.01)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(mine + ".ready", "w").close()
while True:
    time.sleep(1)
"""


def partner(mine: Path, other: Path) -> subprocess.Popen[bytes]:
    """A process that exits on SIGTERM once ``other`` was written."""
    return subprocess.Popen([sys.executable, "-c", PARTNER, str(mine), str(other)])


def test_each_process_is_asked_to_stop_before_any_is_waited_for(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    pair = [partner(first, second), partner(second, first)]
    for path in (first, second):
        wait_until(lambda path=path: Path(f"{path}.ready").exists(), 30, f"{path.name} to start")

    stop_together(pair, grace_s=30)

    assert [process.returncode for process in pair] == [0, 0]


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    lone = partner(tmp_path / "lone", tmp_path / "never")
    wait_until(lambda: (tmp_path / "lone.ready").exists(), 30, "the process to start")

    stop_together([lone], grace_s=0.2)

    assert lone.returncode == -9
