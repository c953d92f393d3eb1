"""People approving tool calls across real processes: a `parley worker` offering the sample
tools (tests/support/tool_modules/sample.py, whose ``rollback`` needs approval and counts
its runs in a file), `parley coordinator`s, and approvers answering with `parley approve`
as its own process, against the real Redis."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.approvals import Approval
from parley.shared.models import RoomSpec, ToolCallRecord, ToolCallStatus
from parley.shared.settings import Settings
from tests.support.commands import run_parley
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

SAMPLE = "tests.support.tool_modules.sample"
RESULTS = {"rollback": "rolled back checkout", "restart": "restarted checkout"}
# A short lease: a standby takes a killed coordinator's room within seconds.
SHORT_TTL = {"PARLEY_LEASE_TTL_S": "1.5"}


def incident_room(queue: str, approval_timeout_s: float = 60, tool: str = "rollback"
                  ) -> RoomSpec:
    """A selector room: the scripted selector picks the SRE, whose one call asks for a
    ``tool`` call on checkout (approved by alice) and then says it is done; then the run
    ends."""
    return RoomSpec.model_validate({
        "name": "approvals",
        "approvers": ["alice"],
        "approval_timeout_s": approval_timeout_s,
        "policy": {"kind": "selector", "max_turns": 2, "call_timeout_s": 10,
                   "selector": {"model": "scripted", "queue": queue,
                                "script": [{"content": "SRE"}, {"content": "TERMINATE"}]}},
        "agents": [{"name": "SRE", "model": "scripted", "queue": queue, "tools": [tool],
                    "script": [{"tool_calls": [{"name": tool,
                                                "arguments": {"service": "checkout"}}]},
                               {"content": "Done with it."}]},
                   {"name": "Bob", "model": "scripted", "queue": queue, "script": []}],
    })


def start(processes: ProcessGroup, settings: Settings, queue: str, runs: Path
          ) -> tuple[Client, subprocess.Popen[bytes]]:
    """A worker offering the sample tools and a coordinator; a client once the worker's
    offer is live (a room naming its tools is refused before), and the coordinator."""
    processes.worker("-Q", queue, "-c", "4",
                     env={"PARLEY_WORKER_TOOLS": SAMPLE, "PARLEY_TEST_TOOL_RUNS": str(runs)})
    coordinator = processes.coordinator("--id", "first", env=SHORT_TTL)
    client = Client(settings)
    wait_until(lambda: "rollback" in client.tool_catalog(), 60, "the worker's offer")
    return client, coordinator


def pending_one(client: Client, room: str) -> Approval:
    """The room's one pending approval, once the call asked for it."""
    (approval,) = wait_until(lambda: client.approvals(room), 60, "the approval request")
    return approval


def sre_call(client: Client, room: str) -> ToolCallRecord:
    """The SRE's one tool call, as the turn record holds it."""
    (call,) = next(answer.tool_calls for record in client.turns(room)
                   for answer in record.bids if answer.agent == "SRE")
    return call


def tool_events(client: Client, room: str) -> list[str]:
    """The room's tool and approval events' types, in order."""
    return [event.type for event in client.store.read_events(room)
            if event.type.startswith("tool_")]


def runs_of(runs: Path) -> str:
    return runs.read_text() if runs.exists() else ""


def test_an_approved_tool_call_runs_once_and_says_who_approved_it(processes, settings, queue, tmp_path):
    runs = tmp_path / "runs"
    client, _ = start(processes, settings, queue, runs)
    room = client.create_room(incident_room(queue))
    posted = client.post(room, "Roll checkout back")
    approval = pending_one(client, room)
    assert (approval.agent, approval.tool, approval.arguments) == (
        "SRE", "rollback", {"service": "checkout"})
    assert runs_of(runs) == ""  # it waits for a person

    refused = run_parley(processes.env, "approve", room, approval.id, "--as", "mallory")
    assert refused.returncode == 2
    assert refused.stderr == (f"parley: 'mallory' is not an approver of room {room} "
                              "(approvers: alice)\n")
    approved = run_parley(processes.env, "approve", room, approval.id, "--as", "alice")
    assert approved.returncode == 0, approved.stderr

    result = client.wait(room, posted, timeout_s=60)

    assert [m.content for m in result.messages][1:] == ["Done with it."]
    assert runs_of(runs) == "rollback\n"
    call = sre_call(client, room)
    assert (call.status, call.approved_by, call.result) == (
        ToolCallStatus.OK, "alice", "rolled back checkout")
    # The tool is called once a person approved it.
    assert tool_events(client, room) == ["tool_approval_requested", "tool_approval_answered",
                                         "tool_called", "tool_result"]


def test_a_denied_tool_call_never_runs_and_the_model_is_told_why(processes, settings, queue, tmp_path):
    runs = tmp_path / "runs"
    client, _ = start(processes, settings, queue, runs)
    room = client.create_room(incident_room(queue))
    posted = client.post(room, "Roll checkout back")
    approval = pending_one(client, room)

    denied = run_parley(processes.env, "approve", room, approval.id, "--deny", "--as", "alice",
                        "--reason", "not during the sale")
    assert denied.returncode == 0, denied.stderr
    result = client.wait(room, posted, timeout_s=60)

    assert [m.content for m in result.messages][1:] == ["Done with it."]
    assert runs_of(runs) == ""
    call = sre_call(client, room)
    # The result is what the model read for the call.
    assert (call.status, call.approved_by, call.result) == (
        ToolCallStatus.DENIED, "alice", "The tool call was denied by alice: not during the sale.")


def test_an_unanswered_approval_times_out_as_a_denial(processes, settings, queue, tmp_path):
    runs = tmp_path / "runs"
    client, _ = start(processes, settings, queue, runs)
    room = client.create_room(incident_room(queue, approval_timeout_s=2))
    posted = client.post(room, "Roll checkout back")
    pending_one(client, room)

    result = client.wait(room, posted, timeout_s=60)

    assert [m.content for m in result.messages][1:] == ["Done with it."]
    assert runs_of(runs) == ""
    call = sre_call(client, room)
    assert call.status is ToolCallStatus.DENIED and call.approved_by == ""
    assert call.result.startswith("The tool call was denied: ")
    assert client.approvals(room) == []
    (answered,) = client.answered_approvals(room)
    assert answered.status.value == "timed_out"


# restart's timeout_s (1 s) is shorter than the wait for alice: the call asked again by the
# standby must wait for her answer too, not take the waiting call for a stopped one.
@pytest.mark.parametrize("tool", ["rollback", "restart"])
def test_a_pending_approval_outlives_its_coordinator(processes, settings, queue, tmp_path,
                                                     tool):
    runs = tmp_path / "runs"
    client, doomed = start(processes, settings, queue, runs)
    room = client.create_room(incident_room(queue, tool=tool))
    posted = client.post(room, "Roll checkout back")
    approval = pending_one(client, room)
    processes.kill(doomed)
    processes.coordinator("--id", "standby", env=SHORT_TTL)
    wait_until(lambda: (client.store.lease_holder(room) or "").startswith("standby:"), 30,
               "the standby to take the room")

    listed = run_parley(processes.env, "approvals", room, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [a["id"] for a in json.loads(listed.stdout)["approvals"]] == [approval.id]
    approved = run_parley(processes.env, "approve", room, approval.id, "--as", "alice")
    assert approved.returncode == 0, approved.stderr
    result = client.wait(room, posted, timeout_s=60)

    assert [m.content for m in result.messages][1:] == ["Done with it."]
    assert [m.content for m in client.messages(room)].count("Done with it.") == 1
    assert runs_of(runs) == f"{tool}\n"
    call = sre_call(client, room)
    assert (call.status, call.approved_by, call.result) == (
        ToolCallStatus.OK, "alice", RESULTS[tool])
