"""The dependency direction of docs/architecture.md, "Package layout": parley ->
coordinator, workers -> shared; the coordinator never imports the workers' code or
litellm, and neither does ``import parley``."""

from __future__ import annotations

import subprocess
import sys

import pytest


def imported_after(statement: str) -> set[str]:
    """Packages loaded by ``statement`` in a fresh interpreter: top-level names, and
    parley's own subpackages as ``parley.<name>``."""
    code = (f"{statement}\nimport sys\n"
            "print(' '.join(sorted({'.'.join(m.split('.')[:2]) if m.startswith('parley.') "
            "else m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize("statement", [
    "import parley",
    "import parley.coordinator.service, parley.coordinator.turn_loop, parley.coordinator.transport",
])
def test_front_door_and_coordinator_load_no_worker_code(statement):
    loaded = imported_after(statement)
    assert "parley.workers" not in loaded
    assert "litellm" not in loaded


def test_nothing_loads_under_a_bare_folder_name():
    loaded = imported_after("import parley, parley.cli, parley.coordinator.service, parley.workers.tasks")
    assert not loaded & {"coordinator", "workers", "shared"}
