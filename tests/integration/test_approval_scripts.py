"""The approval scripts: a request is written once per id, only an approver answers, the
first answer wins, and an approval past its time is timed out (real Redis and fakeredis)."""

from __future__ import annotations

import time

import pytest
import redis

from parley.shared.approvals import (
    ANSWERED_KEPT,
    ApprovalClosed,
    ApprovalNotFound,
    ApprovalStatus,
    NotAnApprover,
)
from parley.shared.events import ToolApprovalAnswered, ToolApprovalRequested
from parley.shared.keys import Keys
from parley.shared.models import RoomSpec
from parley.shared.store import RoomStore
from tests.support.rooms import scripted_spec

ROOM = "ap1"
CALL = "3.1.2.1.0"


def approval_spec() -> RoomSpec:
    """Two scripted agents, A calling search_logs under approval; alice and bob approve."""
    spec = scripted_spec({"A": [], "B": []}, bid_mode="intent").model_dump()
    spec["agents"][0].update(tools=["search_logs"], approve=["search_logs"])
    spec["approvers"] = ["alice", "Bob"]
    return RoomSpec.model_validate(spec)


@pytest.fixture
def store(any_redis: redis.Redis, keys: Keys) -> RoomStore:
    store = RoomStore(any_redis, keys)
    store.create_room(ROOM, approval_spec())
    return store


def ask(store: RoomStore, call: str = CALL, timeout_s: float = 60.0, **arguments: object):
    return store.approvals.request(ROOM, call, "A", "search_logs",
                                   arguments or {"service": "checkout"}, 3, 1, timeout_s)


def test_a_request_is_written_once_and_a_request_again_finds_it(store: RoomStore) -> None:
    created, first = ask(store)
    again_created, again = ask(store, service="other")
    assert (created, again_created) == (True, False)
    assert again == first
    assert first.status is ApprovalStatus.PENDING
    assert first.arguments == {"service": "checkout"}
    assert first.expires_at == pytest.approx(first.requested_at + 60.0, abs=1e-5)
    assert [a.id for a in store.approvals.pending(ROOM)] == [CALL]
    requested = [e for e in store.read_events(ROOM) if isinstance(e, ToolApprovalRequested)]
    assert [(e.approval_id, e.agent, e.tool, e.arguments, e.turn, e.phase)
            for e in requested] == [(CALL, "A", "search_logs", {"service": "checkout"}, 3, 1)]


def test_an_approver_answers_and_the_answer_is_recorded_with_its_event(
        store: RoomStore) -> None:
    ask(store)
    answered = store.approvals.answer(ROOM, CALL, approve=True, by="bob", reason="fine")
    assert (answered.status, answered.by, answered.reason) == (ApprovalStatus.APPROVED, "Bob",
                                                               "fine")
    assert answered.answered_at is not None
    assert store.approvals.pending(ROOM) == []
    assert [a.id for a in store.approvals.answered(ROOM)] == [CALL]
    events = [e for e in store.read_events(ROOM) if isinstance(e, ToolApprovalAnswered)]
    assert [(e.approval_id, e.approved, e.by, e.reason, e.status) for e in events] == [
        (CALL, True, "Bob", "fine", "approved")]


def test_someone_not_on_the_roster_is_refused_by_name(store: RoomStore) -> None:
    ask(store)
    with pytest.raises(NotAnApprover, match=r"^'mallory' is not an approver of room ap1 "
                                            r"\(approvers: alice, Bob\)$"):
        store.approvals.answer(ROOM, CALL, approve=True, by="mallory")
    assert [a.id for a in store.approvals.pending(ROOM)] == [CALL]


def test_the_script_itself_refuses_a_name_off_the_roster(store: RoomStore) -> None:
    ask(store)
    keys = store.keys
    with pytest.raises(redis.ResponseError, match="^NOTAPPROVER alice, Bob$"):
        store.scripts.answer_approval(
            keys=[keys.spec(ROOM), keys.approvals(ROOM), keys.approvals_open(ROOM),
                  keys.approvals_done(ROOM), keys.events(ROOM)],
            args=[CALL, "approved", "mallory", "", 100, 10])


def test_the_first_answer_wins(store: RoomStore) -> None:
    ask(store)
    store.approvals.answer(ROOM, CALL, approve=False, by="alice", reason="not now")
    with pytest.raises(ApprovalClosed, match=r"was already denied by alice$"):
        store.approvals.answer(ROOM, CALL, approve=True, by="bob")
    record = store.approvals.get(ROOM, CALL)
    assert record is not None
    assert (record.status, record.by, record.reason) == (ApprovalStatus.DENIED, "alice",
                                                         "not now")


def test_an_unknown_id_is_refused(store: RoomStore) -> None:
    with pytest.raises(ApprovalNotFound, match=r"^no approval '9\.9' in room ap1$"):
        store.approvals.answer(ROOM, "9.9", approve=True, by="alice")


def test_an_approval_past_its_time_is_timed_out_not_approved(store: RoomStore) -> None:
    ask(store, timeout_s=0.05)
    time.sleep(0.1)  # the approval's time must pass on Redis's clock
    with pytest.raises(ApprovalClosed, match=r"timed out: no approver answered within 0\.05s$"):
        store.approvals.answer(ROOM, CALL, approve=True, by="alice")
    record = store.approvals.get(ROOM, CALL)
    assert record is not None and record.status is ApprovalStatus.TIMED_OUT
    assert store.approvals.pending(ROOM) == []


def test_timing_out_is_refused_before_the_time_is_up(store: RoomStore) -> None:
    ask(store)
    closed, record = store.approvals.time_out(ROOM, CALL)
    assert not closed and record.status is ApprovalStatus.PENDING


def test_a_unique_prefix_finds_a_pending_approval(store: RoomStore) -> None:
    ask(store, "3.1.2.1.0")
    ask(store, "3.1.2.1.1")
    ask(store, "4.0.1.1.0")
    assert store.approvals.find(ROOM, "4.").id == "4.0.1.1.0"
    with pytest.raises(ApprovalNotFound, match="names 2 approvals"):
        store.approvals.find(ROOM, "3.1")


def test_answered_records_past_the_cap_are_dropped_oldest_first(store: RoomStore,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr("parley.shared.approvals.ANSWERED_KEPT", 2)
    for index in range(3):
        ask(store, f"1.0.1.1.{index}")
        store.approvals.answer(ROOM, f"1.0.1.1.{index}", approve=True, by="alice")
    assert [a.id for a in store.approvals.answered(ROOM)] == ["1.0.1.1.2", "1.0.1.1.1"]
    assert store.approvals.get(ROOM, "1.0.1.1.0") is None
    assert not any(field.startswith(b"1.0.1.1.0:")
                   for field in store.redis.hkeys(store.keys.approvals(ROOM)))
    assert ANSWERED_KEPT == 1000


def test_deleting_the_room_removes_its_approvals(store: RoomStore) -> None:
    ask(store)
    store.approvals.answer(ROOM, CALL, approve=True, by="alice")
    ask(store, "5.0.1.1.0")
    store.delete(ROOM)
    assert not store.redis.exists(store.keys.approvals(ROOM), store.keys.approvals_open(ROOM),
                                  store.keys.approvals_done(ROOM))
