"""``parley approvals`` and ``parley approve``: the pending tool calls listed with their
ids, an answer given in one line, and one line (exit 2) for each refusal; on fakeredis."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.shared.approvals import ApprovalStatus
from parley.shared.models import RoomSpec
from tests.support.fake_client import cli_on_fake_client
from tests.support.rooms import scripted_spec

ROOM = "room-1"
CALL = "2.1.3.1.0"


@pytest.fixture
def client(monkeypatch) -> Client:
    client = cli_on_fake_client(monkeypatch)
    spec = scripted_spec({"A": [], "B": []}, bid_mode="intent").model_dump()
    spec["agents"][0].update(tools=["search_logs"], approve=["search_logs"])
    spec["approvers"] = ["alice", "bob"]
    client.store.create_room(ROOM, RoomSpec.model_validate(spec))
    client.store.approvals.request(ROOM, CALL, "A", "search_logs", {"service": "checkout"},
                                   2, 1, 300)
    return client


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


def test_approvals_lists_each_pending_call_with_its_id(client) -> None:
    code, output = invoke("approvals", ROOM)
    assert code == 0
    assert output.startswith(f"{CALL}  A  search_logs(service=checkout)  waiting ")
    assert "s left)" in output
    code, output = invoke("approvals", ROOM, "--json")
    listed = json.loads(output)
    assert [(a["id"], a["agent"], a["tool"], a["arguments"], a["status"])
            for a in listed["approvals"]] == [
        (CALL, "A", "search_logs", {"service": "checkout"}, "pending")]
    assert listed["approvals"][0]["waiting_s"] >= 0


def test_approve_answers_in_one_line_by_a_unique_prefix(client) -> None:
    code, output = invoke("approve", ROOM, "2.1", "--as", "alice")
    assert (code, output) == (0, f"approved search_logs(service=checkout) in room {ROOM} as "
                                 "alice\n")
    assert invoke("approvals", ROOM) == (0, f"no tool call waits for approval in room {ROOM}\n")


def test_deny_carries_its_reason(client) -> None:
    code, output = invoke("approve", ROOM, CALL, "--deny", "--as", "bob", "--reason", "not now")
    assert (code, output) == (0, f"denied search_logs(service=checkout) in room {ROOM} as bob\n")
    record = client.store.approvals.get(ROOM, CALL)
    assert record is not None
    assert (record.status, record.reason) == (ApprovalStatus.DENIED, "not now")


@pytest.mark.parametrize(("args", "line"), [
    (["--as", "mallory"], f"'mallory' is not an approver of room {ROOM} (approvers: alice, bob)"),
    ([], f"'User' is not an approver of room {ROOM} (approvers: alice, bob)"),
])
def test_someone_not_an_approver_is_refused_by_name(client, args, line) -> None:
    code, output = invoke("approve", ROOM, CALL, *args)
    assert (code, output) == (2, f"parley: {line}\n")


def test_a_second_answer_is_refused_in_one_line(client) -> None:
    invoke("approve", ROOM, CALL, "--as", "alice")
    code, output = invoke("approve", ROOM, CALL, "--deny", "--as", "bob")
    assert (code, output) == (2, f"parley: search_logs(service=checkout) in room {ROOM} was "
                                 "already approved by alice\n")


def test_an_unknown_id_or_room_is_one_line(client) -> None:
    code, output = invoke("approve", ROOM, "9.", "--as", "alice")
    assert (code, output) == (2, f"parley: no approval '9.' in room {ROOM}: parley approvals "
                                 f"{ROOM} lists the pending ones\n")
    assert invoke("approvals", "nope") == (2, "parley: no room 'nope'\n")
