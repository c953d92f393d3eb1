"""The tool journal on the real Redis: a tool call claimed once, its result replayed, a
start without a result uncertain (run again only for an idempotent tool), a live claim
waited for, and the journal capped."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from parley.shared.models import AgentSpec, ToolCallRecord, ToolCallStatus
from parley.shared.store import RoomStore
from parley.workers.tools.base import ToolDef, ToolSource
from parley.workers.tools.journal import AskedCall, Claim, Done, Step, ToolJournal
from parley.workers.tools.loop import ToolLoop, ToolRun
from parley.workers.tools.python_tools import load_python_tools
from parley.workers.tools.toolbox import Toolbox
from tests.support.rooms import scripted_spec

pytestmark = pytest.mark.redis
ROOM = "room-1"


@pytest.fixture
def store(real_redis, keys) -> RoomStore:
    store = RoomStore(real_redis, keys)
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    return store


def record(call_id: str = "1.0.1.0.0") -> ToolCallRecord:
    return ToolCallRecord(id=call_id, agent="A", tool="lookup", arguments={"service": "db"})


def test_a_tool_call_is_claimed_once_and_its_result_replaces_the_claim(store):
    first, second = (ToolJournal(store, ROOM, 1000, 1, 0) for _ in range(2))
    claim, held = first.claim(record(), 30)
    assert isinstance(claim, Claim) and held is None
    again, held = second.claim(record(), 30)
    assert again is None and isinstance(held, Claim) and held.by == first.by
    done = first.finish(record().model_copy(update={"result": "3 lines"}), "l1\nl2\nl3", claim)
    assert isinstance(second.read(record().id), Done)
    assert second.claim(record(), 30) == (None, done)
    types = [event.type for event in store.read_events(ROOM)]
    assert types.count("tool_called") == 1 and types.count("tool_result") == 1


def test_the_first_result_stays(store):
    journal = ToolJournal(store, ROOM, 1000, 1, 0)
    claim, _ = journal.claim(record(), 30)
    journal.finish(record().model_copy(update={"result": "first"}), "first", claim)
    late = journal.finish(record().model_copy(update={"result": "second"}), "second", claim)
    assert late.text == "first"


def test_a_stale_claim_can_be_taken_over_only_by_replacing_exactly_it(store):
    journal = ToolJournal(store, ROOM, 1000, 1, 0)
    stale, _ = journal.claim(record(), 0.01)
    time.sleep(0.02)  # the claim's own timeout, not a wait for another process
    held = journal.read(record().id)
    assert isinstance(held, Claim) and held.expires < time.time()
    retaken, _ = journal.claim(record(), 30, replacing=held.raw)
    assert retaken is not None and retaken.raw != stale.raw
    assert journal.claim(record(), 30, replacing=held.raw)[0] is None  # it is not there now


def test_a_wait_for_a_live_claim_ends_when_its_result_comes(store):
    runner, waiter = (ToolJournal(store, ROOM, 1000, 1, 0) for _ in range(2))
    claim, _ = runner.claim(record(), 30)
    timer = threading.Timer(0.2, runner.finish, (record(), "result", claim))
    timer.start()
    try:
        started = time.monotonic()
        done = waiter.wait(record().id, time.time() + 10)
    finally:
        timer.join()
    assert isinstance(done, Done) and done.text == "result"
    assert time.monotonic() - started < 5


def test_a_model_step_is_recorded_once_the_first_writer_winning(store):
    journal = ToolJournal(store, ROOM, 1000, 1, 0)
    mine = Step("", (AskedCall("c1", "lookup", '{"service": "db"}'),))
    theirs = Step("", (AskedCall("c9", "lookup", '{"service": "web"}'),))
    assert journal.record_step("1.0.1.0", mine) == mine
    assert journal.record_step("1.0.1.0", theirs) == mine
    assert journal.recorded_step("1.0.1.0") == mine


def test_the_journal_keeps_about_its_cap_and_goes_with_the_room(store, real_redis, keys):
    journal = ToolJournal(store, ROOM, 100, 1, 0)
    for n in range(130):
        journal.claim(record(f"1.0.1.0.{n}"), 30)
    assert real_redis.hlen(keys.tools(ROOM)) == 100
    assert journal.read("1.0.1.0.0") is None and journal.read("1.0.1.0.129") is not None
    assert keys.tools(ROOM) in keys.room_keys(ROOM)
    store.delete(ROOM, force=True)
    assert not real_redis.exists(keys.tools(ROOM), keys.tool_ids(ROOM))
    assert journal.claim(record("1.0.1.0.200"), 30) == (None, None)  # the room is gone


class IdempotentLookup:
    """The sample tools, ``lookup`` marked idempotent."""

    def __init__(self, source: ToolSource) -> None:
        self.source = source

    def tools(self) -> list[ToolDef]:
        return [replace(tool, options=replace(tool.options, idempotent=True))
                if tool.name == "lookup" else tool for tool in self.source.tools()]

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        return self.source.call(name, arguments, timeout_s)


def test_an_uncertain_call_is_told_and_an_idempotent_one_runs_again(store, tmp_path,
                                                                     monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("PARLEY_TEST_TOOL_RUNS", str(runs))
    box = Toolbox([IdempotentLookup(load_python_tools(["tests.support.tool_modules.sample"]))])
    gone = ToolJournal(store, ROOM, 1000, 1, 0)
    for call_id in ("1.0.1.0.0", "1.0.1.0.1"):
        gone.claim(record(call_id), 0.01)  # started by a worker that then stopped
    time.sleep(0.02)  # past the claims' own timeout
    agent = AgentSpec(name="A", model="scripted", script=[], tools=["counted", "lookup"])
    loop = ToolLoop(agent, box.resolve(agent.tools), "1.0.1",
                    ToolRun(box, ToolJournal(store, ROOM, 1000, 1, 0)), time.time() + 10)
    results = loop.run_calls(0, (AskedCall("a", "counted", '{"label": "x"}'),
                                 AskedCall("b", "lookup", '{"service": "db"}')))
    assert [record_.status for record_, _ in results] == [ToolCallStatus.UNCERTAIN,
                                                          ToolCallStatus.OK]
    assert runs.read_text() == "lookup\n"  # counted did not run again; lookup did
