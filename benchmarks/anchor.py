"""The swarms anchor: the real swarms ``GroupChat`` run in-process by stub agents, in its
own virtual environment (swarms' dependency pins differ from parley's).

    .venv/bin/python -m benchmarks.anchor --agents 4 --turns 10 --history-turns 0
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import summary
from benchmarks.turns import growth, run_command_line

HERE = Path(__file__).parent / "swarms_anchor"


def swarms_python() -> Path:
    """The swarms venv's python, creating the venv on first use (pip install swarms)."""
    created = subprocess.run(["bash", str(HERE / "setup_venv.sh")], check=True,
                             capture_output=True, text=True)
    return Path(created.stdout.strip().splitlines()[-1]) / "bin" / "python"


def run(sizes: list[int], turns: int, sleeps: list[float], history_agents: int,
        history_turns: int) -> dict[str, Any]:
    """Run the anchor and summarise it exactly as parley's rooms are summarised."""
    python = swarms_python()
    with tempfile.TemporaryDirectory(prefix="swarms-anchor-") as workspace:
        out = Path(workspace) / "anchor.json"
        args = [str(python), str(HERE / "run_anchor.py"),
                "--agents", ",".join(map(str, sizes)), "--turns", str(turns),
                "--sleep", ",".join(map(str, sleeps)), "--history-agents", str(history_agents),
                "--history-turns", str(history_turns), "--json", str(out)]
        env = {**os.environ, "SWARMS_TELEMETRY_ON": "false", "WORKSPACE_DIR": workspace}
        subprocess.run(args, check=True, env=env)
        raw = json.loads(out.read_text())
    result: dict[str, Any] = {
        "swarms_version": raw["swarms_version"],
        "runs": [{"agents": row["agents"], "sleep_s": row["sleep_s"], **summary(row["turn_ms"])}
                 for row in raw["runs"]],
    }
    if raw.get("history_growth"):
        result["history"] = growth(raw["history_growth"]["turn_ms"], history_agents,
                                   history_turns)
    return result


def main(argv: list[str] | None = None) -> None:
    """Run the anchor from the command line and print its summary as JSON."""
    run_command_line(run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
