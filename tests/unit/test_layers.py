"""The dependency direction of DESIGN.md: parley -> coordinator, workers -> shared; the
coordinator never imports the workers' code or litellm, and neither does ``import parley``."""

from __future__ import annotations

import subprocess
import sys

import pytest


def imported_after(statement: str) -> set[str]:
    """Top-level packages loaded by ``statement`` in a fresh interpreter."""
    code = f"{statement}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize("statement", [
    "import parley",
    "import coordinator.service, coordinator.turn_loop, coordinator.transport",
])
def test_front_door_and_coordinator_load_no_worker_code(statement):
    loaded = imported_after(statement)
    assert "workers" not in loaded
    assert "litellm" not in loaded
