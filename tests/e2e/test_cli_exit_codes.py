"""``parley`` as scripts run it, across real processes: output piped to a file is never
wrapped or cut, and ``parley run``'s exit code tells an idle end (0), a failed run (1) and
a timeout (3) apart."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from parley.shared.models import RoomSpec
from tests.support.commands import run_parley
from tests.support.rooms import scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

LONG_NAME = "a-room-whose-name-is-longer-than-a-terminal"
LONG_REPLY = "Ship it behind a flag, " + "then widen the cohort week by week " * 8


def parley(processes, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``parley ARGS`` with stdout and stderr piped, as if the terminal were 40 columns."""
    return run_parley({**processes.env, "COLUMNS": "40"}, *args, timeout_s=timeout_s)


def spec_file(tmp_path: Path, spec: RoomSpec) -> str:
    path = tmp_path / "room.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    return str(path)


def test_piped_output_is_never_wrapped_nor_an_id_cut(processes, queue, tmp_path):
    processes.worker("-Q", queue)
    processes.coordinator()
    # The long reply is not the run's last message: this test is about width, not about
    # the live transcript catching a message committed as the run ends.
    spec = scripted_spec({"Optimist": [{"score": 0.9, "message": LONG_REPLY}],
                          "Skeptic": [{"score": 0.1, "message": "no"},
                                      {"score": 0.9, "message": "Agreed."}]}, queue=queue)
    path = spec_file(tmp_path, spec.model_copy(update={"name": LONG_NAME}))

    run = parley(processes, "run", path, "--task", "Launch next week?")
    room = run.stdout.splitlines()[-1].split(" · ")[0].removeprefix("room ")
    status = parley(processes, "status")

    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[:2] == ["  1 User: Launch next week?",
                                           f"  2 Optimist (score 0.90): {LONG_REPLY.strip()}"]
    assert room.startswith(LONG_NAME[:40]) and len(room) == 49  # ids take 40 characters of a name
    assert status.returncode == 0, status.stderr
    assert any(room in line and "lull" in line for line in status.stdout.splitlines())


def test_a_failed_run_exits_1_and_a_run_out_of_time_exits_3(processes, queue, tmp_path):
    processes.coordinator()  # and no worker: nobody answers
    quick = scripted_spec({"A": [], "B": []}, queue=queue, bid_timeout_s=0.5)
    slow = scripted_spec({"A": [], "B": []}, queue=queue, bid_timeout_s=30)

    failed = parley(processes, "run", spec_file(tmp_path, quick), "--task", "anyone?", "--json")
    late = parley(processes, "run", spec_file(tmp_path, slow), "--task", "anyone?",
                  "--timeout", "1")

    assert failed.returncode == 1, failed.stderr
    result = json.loads(failed.stdout)
    assert (result["status"], result["stop_reason"]) == ("failed", "no_bids")
    assert late.returncode == 3, late.stderr
    assert late.stderr.startswith("parley: room test-room-")
    assert late.stderr.endswith(" did not finish within 1s\n")
