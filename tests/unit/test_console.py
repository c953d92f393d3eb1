"""The discussion console's pure parts (what it shows of a room, how a line is read) and
its app on a Redis nobody answers at."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest

from parley import processes
from parley.client import Client
from parley.console.app import DiscussionConsole
from parley.console.commands import Console, run_line
from parley.console.room_view import ASKING_YOU, NEXT, NOTHING_TO_ADD, SPEAKING, WRITING, RoomView
from parley.shared.events import AnswerArrived, MessageChunk, TurnOpened
from parley.shared.keys import Keys
from parley.shared.models import Answer, AnswerStatus, CallKind, Message, RoomSpec, TurnRecord
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.polling import wait_until_async
from tests.support.rooms import rotating_scripts, scripted_spec


def bid_view(me: str = "Ada") -> RoomView:
    return RoomView("r1", scripted_spec(rotating_scripts(2, 2)), me)


def chunk(index: int, text: str, agent: str = "agent0") -> MessageChunk:
    return MessageChunk(id=f"1-{index}", type="message_chunk", turn=1, run=1, agent=agent,
                        index=index, text=text)


def test_chunks_show_under_writing_until_the_message_is_said():
    view = bid_view()
    view.see_event(chunk(0, "Roll"))
    view.see_event(chunk(1, " back"))
    assert view.writing_lines() == ["agent0 writing…: Roll back"]
    assert view.card_state("agent0") == WRITING
    view.see_message(Message(seq=2, sender="agent0", content="Roll back.", score=0.9, run=1))
    assert view.writing_lines() == []
    assert view.lines[-1].text == "  2 agent0 (0.90): Roll back."
    assert view.card_state("agent0") == SPEAKING


def test_a_call_made_again_starts_its_text_over_and_a_failed_one_drops_it():
    view = bid_view()
    view.see_event(chunk(0, "first try"))
    view.see_event(chunk(0, "again"))
    assert view.writing_lines() == ["agent0 writing…: again"]
    view.see_event(AnswerArrived(type="answer_arrived", turn=1, agent="agent0",
                                 status=AnswerStatus.ERROR))
    assert view.writing_lines() == []


def test_your_messages_show_as_yours_and_others_under_their_label():
    view = bid_view("Ada")
    view.see_message(Message(seq=1, sender="Ada", content="hi", run=1))
    view.see_message(Message(seq=2, sender="Bob", content="hello", run=1))
    view.see_message(Message(seq=2, sender="Bob", content="hello", run=1))  # read twice
    assert [(line.kind, line.text) for line in view.lines] == [
        ("mine", "  1 you: hi"), ("message", "  2 Bob: hello")]


def test_a_bid_room_shows_the_open_turns_bids_and_who_had_nothing_to_add():
    view = bid_view()
    view.see_event(TurnOpened(type="turn_opened", turn=1, run=1))
    view.see_event(AnswerArrived(type="answer_arrived", turn=1, agent="agent0", score=0.9))
    view.see_event(AnswerArrived(type="answer_arrived", turn=1, agent="agent1", score=0.2))
    assert view.floor_line() == "bids: agent0 0.90, agent1 0.20"
    view.see_turn(TurnRecord(turn=1, run=1, run_turns=1, epoch=1, snapshot_seq=1,
                             messages_in_run=1, recent=[], bids=[
                                 Answer(agent="agent0", turn=1, kind=CallKind.BID, score=0.9,
                                        message="yes"),
                                 Answer(agent="agent1", turn=1, kind=CallKind.BID, score=0.2,
                                        message="")]))
    assert view.card_state("agent1") == NOTHING_TO_ADD
    assert view.card_text("agent0").splitlines()[-1] == "idle · last bid 0.90"


@pytest.fixture
def console() -> Console:
    client = Client(Settings(key_prefix="t"))
    client.redis = fakeredis.FakeRedis()
    client.store = RoomStore(client.redis, Keys("t"))
    return Console(client, client.create_room(scripted_spec(rotating_scripts(2, 2))), "Ada")


@pytest.mark.parametrize(("line", "refusal"), [
    ("/frobnicate now", "unknown command /frobnicate: /help lists them"),
    ("/instruct @agent0", "usage: /instruct @agent TEXT"),
    ("/listen agent0", "usage: /listen @agent"),
    ("/approve", "usage: /approve ID"),
    ("/cancel", "usage: /cancel TASK"),
    ("/task @nobody look at the disk", "'nobody' is not an agent of room test-room-.*"),
])
def test_a_command_that_cannot_be_run_says_why(console, line, refusal):
    with pytest.raises(ValueError, match=f"^{refusal}$"):
        run_line(console, line)


def test_a_line_that_is_no_command_is_posted_as_you(console):
    run_line(console, "the disk is full")
    (entry,) = console.client.redis.xrange(console.client.store.keys.inbox(console.room))
    assert entry[1][b"sender"] == b"Ada" and entry[1][b"content"] == b"the disk is full"


def test_a_redis_nobody_answers_at_is_said_on_the_status_line_and_quit_still_works():
    client = Client(Settings(redis_url=f"redis://127.0.0.1:{processes.free_port()}/0"))
    app = DiscussionConsole(client, "r1", "Ada")

    async def scenario() -> str:
        async with app.run_test() as pilot:
            status = app.query_one("#status")
            await wait_until_async(lambda: "cannot reach Redis" in str(status.render()), 10,
                                   "the status line to say so", 0.02)
            app.query_one("#input").insert_text_at_cursor("/quit")
            await pilot.press("enter")
            await wait_until_async(lambda: not app.is_running, 10, "the console to close", 0.02)
            return str(status.render())

    assert asyncio.run(scenario()).startswith("cannot reach Redis at redis://127.0.0.1:")


class TasksClient(Client):
    """A Client with the background-task methods a cluster that has them offers."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.calls: list[tuple] = []

    def start_task(self, room, agent, text, hand_back=None):
        self.calls.append(("start", room, agent, text, hand_back))
        return {"id": "abc123def456", "agent": agent, "status": "running", "text": text}

    def tasks(self, room):
        return [{"id": "abc123def456", "agent": "agent0", "status": "running", "text": "look"}]

    def cancel_task(self, task_id_or_prefix, room=None):
        self.calls.append(("cancel", task_id_or_prefix, room))


def test_where_background_tasks_exist_the_task_commands_call_them(console):
    client = TasksClient(Settings(key_prefix="t"))
    tasks = Console(client, console.room, "Ada")

    assert run_line(tasks, "/task @agent0 look at the disk") == \
        "task abc123def456 started for agent0"
    assert run_line(tasks, "/tasks") == "abc123  agent0  running  look"
    assert run_line(tasks, "/cancel abc123") == "task abc123 cancelled"
    assert client.calls == [("start", console.room, "agent0", "look at the disk", None),
                            ("cancel", "abc123", console.room)]


def test_a_round_table_shows_its_panel_position_and_who_is_next():
    spec = RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": "Mod"},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("P1", "P2", "Mod")]})
    view = RoomView("r1", spec, "Ada", policy_state={"spoken": "1"})
    assert view.floor_line() == "panel: 1 of 2 spoken, next P2"
    assert [view.card_state(n) for n in ("P1", "P2", "Mod")] == ["", NEXT, ""]


def test_a_selector_room_shows_the_selectors_last_pick():
    spec = RoomSpec.model_validate({
        "policy": {"kind": "selector", "selector": {"model": "scripted", "script": []}},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("Alice", "Bob")]})
    view = RoomView("r1", spec, "Ada")
    view.see_turn(TurnRecord(turn=1, run=1, run_turns=1, epoch=1, snapshot_seq=1,
                             messages_in_run=1, recent=[], bids=[
                                 Answer(agent="selector", turn=1, kind=CallKind.SELECT,
                                        message=" `Bob`. ")]))
    assert view.floor_line() == "the selector picked Bob"


def test_a_discussion_room_shows_its_queue_and_who_asks_you():
    spec = RoomSpec.model_validate({
        "policy": {"kind": "mention", "everyone": ["ana", "ben"]},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("ana", "ben")]})
    view = RoomView("r1", spec, "oncall")
    view.see_queue({"speaking": None, "queue": ["ben"], "listening": [],
                    "asked": [["ana", "oncall"]], "waiting": True, "over": False})
    assert view.floor_line() == "speaking: - · queue: ben · waiting for a person"
    assert (view.card_state("ana"), view.card_state("ben")) == (ASKING_YOU, NEXT)
    assert view.lines[-1].text == "· ana asks you"
