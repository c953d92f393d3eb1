"""Running ``parley`` commands: as their own processes, as an operator would, or in this
process through the CLI's app."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import yaml
from typer.testing import CliRunner

from parley.cli import app
from parley.processes import parley_command


def run_parley(env: Mapping[str, str], *args: str, timeout_s: float = 60
               ) -> subprocess.CompletedProcess[str]:
    """``parley ARGS`` with ``env`` over this process's environment (a test's processes'
    settings: its Redis, prefix ...); stdout and stderr captured as text."""
    return subprocess.run(parley_command(*args), capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **env})


def run_spec_in_process(tmp_path: Path, spec: object, raw: str | None = None) -> tuple[int, str]:
    """``parley run room.yaml --task t`` in this process (no Redis needed to refuse a bad
    spec), the spec written as YAML or ``raw`` as is; its exit code and output."""
    path = tmp_path / "room.yaml"
    path.write_text(raw if raw is not None else yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["run", str(path), "--task", "t"])
    return result.exit_code, result.output
