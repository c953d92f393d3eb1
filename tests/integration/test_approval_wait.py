"""A tool call waiting for a person (workers/tools/approvals.py), on the real Redis: the
answer ends the wait as soon as it lands, from another thread or process; nobody
answering times it out; a call asked again waits on the same request; a worker shutting
down and a turn that ended stop the wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from parley.shared.approvals import ApprovalStatus
from parley.shared.keys import Keys
from parley.shared.models import RoomSpec, ToolCallRecord
from parley.shared.store import RoomStore
from parley.workers import deadlines
from parley.workers.tools.approvals import ApprovalVerdict, ApprovalWaitStopped, await_approval
from tests.conftest import REDIS_URL
from tests.integration.test_approval_scripts import approval_spec
from tests.support.commands import run_parley
from tests.support.polling import wait_until

pytestmark = pytest.mark.redis

ROOM = "ap2"
CALL = ToolCallRecord(id="3.1.2.1.0", agent="A", tool="search_logs",
                      arguments={"service": "checkout"})


@pytest.fixture
def store(real_redis: redis.Redis, keys: Keys) -> RoomStore:
    """The room, with turn 3 open as a coordinator leaves it while its calls run."""
    store = RoomStore(real_redis, keys)
    store.create_room(ROOM, approval_spec())
    real_redis.hset(keys.state(ROOM), mapping={"turn": 3, "turn_open": 1})
    return store


@pytest.fixture
def stopping() -> Iterator[threading.Event]:
    yield deadlines.STOPPING
    deadlines.STOPPING.clear()


def spec_waiting(timeout_s: float) -> RoomSpec:
    return approval_spec().model_copy(update={"approval_timeout_s": timeout_s})


def wait_in_thread(store: RoomStore, spec: RoomSpec) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(await_approval(store, ROOM, spec, CALL))
        except Exception as error:  # noqa: BLE001 - the test reads it
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def pending(store: RoomStore) -> list:
    return store.approvals.pending(ROOM)


def test_an_approval_from_another_thread_ends_the_wait_at_once(store: RoomStore) -> None:
    thread, outcome = wait_in_thread(store, spec_waiting(60))
    wait_until(lambda: pending(store), 10, "the request")
    time.sleep(0.3)  # the call has been waiting a while when the answer comes
    answered_at = time.time()
    store.approvals.answer(ROOM, CALL.id, approve=True, by="alice", reason="go")
    thread.join(10)
    (verdict,) = outcome
    assert verdict.approved and (verdict.by, verdict.reason) == ("alice", "go")
    # Woken by the answer's event, not by the end of a slice.
    assert time.time() - answered_at < 0.5
    assert 0.3 <= verdict.waited_s < 2.0


def test_a_denial_by_parley_approve_in_another_process_is_the_tools_result(
        store: RoomStore, keys: Keys) -> None:
    thread, outcome = wait_in_thread(store, spec_waiting(60))
    wait_until(lambda: pending(store), 10, "the request")
    denied = run_parley({"PARLEY_REDIS_URL": REDIS_URL, "PARLEY_KEY_PREFIX": keys.prefix},
                        "approve", ROOM, "3.1", "--deny", "--as", "bob", "--reason",
                        "not in production")
    assert (denied.returncode, denied.stdout) == (
        0, f"denied search_logs(service=checkout) in room {ROOM} as Bob\n")
    thread.join(10)
    (verdict,) = outcome
    assert not verdict.approved
    assert verdict.denial() == "The tool call was denied by Bob: not in production."


def test_nobody_answering_times_the_approval_out(store: RoomStore) -> None:
    started = time.time()
    verdict = await_approval(store, ROOM, spec_waiting(0.4), CALL)
    assert not verdict.approved and verdict.by == ""
    assert verdict.denial() == "The tool call was denied: no approver answered within 0.4s."
    assert 0.4 <= time.time() - started < 2.0
    record = store.approvals.get(ROOM, CALL.id)
    assert record is not None and record.status is ApprovalStatus.TIMED_OUT


def test_a_call_asked_again_waits_on_the_first_request_and_its_time(store: RoomStore) -> None:
    store.approvals.request(ROOM, CALL.id, "A", "search_logs", {}, 3, 1, 0.6)
    time.sleep(0.3)
    started = time.time()
    # The spec's timeout would be a minute: the request's own expiry counts.
    verdict = await_approval(store, ROOM, spec_waiting(60), CALL)
    assert not verdict.approved
    assert time.time() - started < 1.0
    assert len(store.approvals.answered(ROOM)) == 1


def test_an_answered_request_found_again_answers_at_once(store: RoomStore) -> None:
    store.approvals.request(ROOM, CALL.id, "A", "search_logs", {}, 3, 1, 60)
    store.approvals.answer(ROOM, CALL.id, approve=True, by="alice")
    verdict = await_approval(store, ROOM, spec_waiting(60), CALL)
    assert verdict.approved and verdict.waited_s < 0.5


def test_the_wait_holds_the_calls_deadline_for_as_long_as_it_waited() -> None:
    verdict = ApprovalVerdict(True, "alice", "", waited_s=100.0)
    assert verdict.held(1000.0) == 1100.0


def test_a_worker_shutting_down_stops_waiting_and_keeps_the_request(
        store: RoomStore, stopping: threading.Event) -> None:
    thread, outcome = wait_in_thread(store, spec_waiting(60))
    wait_until(lambda: pending(store), 10, "the request")
    stopping.set()
    thread.join(5)
    assert isinstance(outcome[0], ApprovalWaitStopped)
    assert [a.id for a in pending(store)] == [CALL.id]


def test_a_turn_that_ended_stops_the_wait(store: RoomStore, keys: Keys) -> None:
    thread, outcome = wait_in_thread(store, spec_waiting(60))
    wait_until(lambda: pending(store), 10, "the request")
    store.redis.hset(keys.state(ROOM), "turn_open", 0)
    thread.join(5)
    assert isinstance(outcome[0], ApprovalWaitStopped)
    assert "turn 3 ended" in str(outcome[0])
