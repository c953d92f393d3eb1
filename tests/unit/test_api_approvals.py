"""``GET /rooms/{room}/approvals`` and ``POST /rooms/{room}/approvals/{id}``: the pending
tool calls, an approver's answer, and each refusal as one line with its status; on
fakeredis."""

from __future__ import annotations

import pytest

from parley.shared.approvals import ApprovalStatus
from parley.shared.models import RoomSpec
from parley.shared.store import RoomStore
from tests.support.api import AUTH
from tests.support.rooms import scripted_spec

ROOM = "r1"
CALL = "2.1.3.1.0"


@pytest.fixture
def room(store: RoomStore) -> str:
    spec = scripted_spec({"A": [], "B": []}, bid_mode="intent").model_dump()
    spec["agents"][0].update(tools=["rollback"], approve=["rollback"])
    spec["approvers"] = ["alice", "bob"]
    store.create_room(ROOM, RoomSpec.model_validate(spec))
    store.approvals.request(ROOM, CALL, "A", "rollback", {"to": "v41"}, 2, 1, 300)
    return ROOM


def test_the_pending_approvals_are_listed_with_their_ids(api, room) -> None:
    reply = api.get(f"/rooms/{room}/approvals")
    assert reply.status_code == 200
    body = reply.json()
    assert [(a["id"], a["agent"], a["tool"], a["arguments"], a["status"])
            for a in body["approvals"]] == [(CALL, "A", "rollback", {"to": "v41"}, "pending")]
    assert (body["answered"], body["approvers"]) == ([], ["alice", "bob"])


def test_an_approver_approves_and_the_answer_is_listed(api, room, store) -> None:
    reply = api.post(f"/rooms/{room}/approvals/{CALL}",
                     json={"approve": True, "by": "alice", "reason": "ok"})
    assert reply.status_code == 200
    assert (reply.json()["status"], reply.json()["by"]) == ("approved", "alice")
    body = api.get(f"/rooms/{room}/approvals").json()
    assert body["approvals"] == []
    assert [a["id"] for a in body["answered"]] == [CALL]


def test_a_denial_keeps_its_reason(api, room, store) -> None:
    reply = api.post(f"/rooms/{room}/approvals/{CALL}",
                     json={"approve": False, "by": "bob", "reason": "freeze week"})
    assert reply.status_code == 200
    record = store.approvals.get(room, CALL)
    assert record is not None
    assert (record.status, record.reason) == (ApprovalStatus.DENIED, "freeze week")


@pytest.mark.parametrize(("approval", "body", "status", "error"), [
    (CALL, {"approve": True, "by": "mallory"}, 403,
     "'mallory' is not an approver of room r1 (approvers: alice, bob)"),
    ("7.0.1.1.0", {"approve": True, "by": "alice"}, 404,
     "no approval '7.0.1.1.0' in room r1: parley approvals r1 lists the pending ones"),
])
def test_refusals_are_one_line_with_their_status(api, room, approval, body, status, error):
    reply = api.post(f"/rooms/{room}/approvals/{approval}", json=body)
    assert (reply.status_code, reply.json()) == (status, {"error": error})


def test_a_second_answer_is_a_conflict(api, room) -> None:
    api.post(f"/rooms/{room}/approvals/{CALL}", json={"approve": True, "by": "alice"})
    reply = api.post(f"/rooms/{room}/approvals/{CALL}", json={"approve": False, "by": "bob"})
    assert reply.status_code == 409
    assert reply.json() == {"error": "rollback(to=v41) in room r1 was already approved by alice"}


def test_unknown_fields_and_an_unknown_room_are_refused(api, room) -> None:
    reply = api.post(f"/rooms/{room}/approvals/{CALL}",
                     json={"approve": True, "by": "alice", "as_admin": True})
    assert reply.status_code == 422
    assert "as_admin" in reply.json()["error"]
    assert api.get("/rooms/nope/approvals").status_code == 404


def test_answering_needs_a_token_when_tokens_are_set(secured, room) -> None:
    body = {"approve": True, "by": "alice"}
    assert secured.post(f"/rooms/{room}/approvals/{CALL}", json=body).status_code == 401
    assert secured.post(f"/rooms/{room}/approvals/{CALL}", json=body,
                        headers=AUTH).status_code == 200
