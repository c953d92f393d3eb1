"""The discussion console: a full-screen terminal on one room, built with Textual.

The room on the left (every message, tool call and approval asked), a card per agent on
the right, the floor below the cards, your input at the bottom. A thread follows the
room's log and events streams (as ``parley follow`` does, so any number of consoles follow
one room) and hands what it read to the app; a Redis it cannot reach is said on the status
line and read again from the same stream ids once it answers, so nothing falls in between
(a coordinator's failover changes nothing here: the streams are the room's)."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import redis
from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Input, RichLog, Static

from parley.client.client import Client
from parley.console.commands import QUIT, Console, run_line
from parley.console.room_view import RoomView
from parley.shared.events import Event, QueueChanged, TurnDecided
from parley.shared.models import Message, TurnRecord
from parley.shared.store import RoomNotFound
from parley.views.redis_problems import unreachable_redis

# How long one read of the room's streams blocks: the thread sees the app closing this often.
FOLLOW_BLOCK_MS = 500
RETRY_S = 1.0  # between reads of a Redis that did not answer
STYLES = {"mine": "bold green", "message": "", "tool": "dim", "approval": "bold yellow",
          "note": "dim italic"}


class DiscussionConsole(App[None]):
    """A room, its agents and its floor, live; what you type is posted as ``me``."""

    CSS = """
    #left { width: 2fr; }
    #right { width: 1fr; border-left: solid $primary; }
    #transcript { height: 1fr; }
    #writing { color: $text-muted; height: auto; max-height: 8; }
    .card { border: round $secondary; padding: 0 1; height: auto; }
    #floor { height: auto; padding: 0 1; border-top: solid $primary; }
    #status { height: auto; color: $warning; }
    """
    TITLE = "parley console"

    def __init__(self, client: Client, room: str, me: str) -> None:
        super().__init__()
        self.client, self.room, self.me = client, room, me
        self.view: RoomView | None = None
        self.shown = 0  # transcript lines drawn
        self.closing = threading.Event()

    def compose(self) -> ComposeResult:
        """The layout: transcript and writing on the left, cards and floor on the right."""
        with Horizontal():
            with Vertical(id="left"):
                yield RichLog(id="transcript", wrap=True, markup=False, highlight=False)
                yield Static("", id="writing", markup=False)
            with Vertical(id="right"):
                yield VerticalScroll(id="cards")
                yield Static("", id="floor", markup=False)
        yield Static(f"connecting to room {self.room}…", id="status", markup=False)
        yield Input(placeholder=f"post as {self.me}, or /help", id="input")

    def on_mount(self) -> None:
        """Follow the room from a thread of its own."""
        self.sub_title = f"room {self.room} · you are {self.me}"
        self.run_worker(self.follow_room, thread=True, exit_on_error=False, group="follow")

    def on_unmount(self) -> None:
        """Let the following thread end at its next read."""
        self.closing.set()

    # -- the following thread ---------------------------------------------------------

    def follow_room(self) -> None:
        """Read the room's streams until the app closes, resuming after an outage from the
        last ids read."""
        cursor: str | None = None
        outage = False
        while not self.closing.is_set():
            try:
                cursor = self.load_room() if cursor is None else self.read_more(cursor)
                if outage:
                    outage = False
                    self.from_thread(self.say, "", "Redis answers again: following on")
            except RoomNotFound as error:
                self.from_thread(self.say, str(error), "")
                self.closing.wait(RETRY_S)
            except redis.RedisError as error:
                outage = True
                url = self.client.settings.redis_url
                self.from_thread(self.say, unreachable_redis(url, error) + "; trying again", "")
                self.closing.wait(RETRY_S)

    def load_room(self) -> str:
        """The room's spec, its transcript so far, its floor; the events id to follow from."""
        store = self.client.store
        _, spec = store.read_spec(self.room)
        state, cursor = store.state_and_last_event(self.room)
        messages = store.read_messages(self.room)
        turns = store.read_turns(self.room, last=1)
        approvals = self.client.approvals(self.room)
        view = RoomView(self.room, spec, self.me, paused=state.paused)
        queue = self.client.speak_queue(self.room) if view.follows_queue else None
        for message in messages:
            view.see_message(message)
        for record in turns:
            view.see_turn(record)
        if queue is not None:
            view.see_queue(queue)
        for approval in approvals:
            view.note(f"{approval.agent} asks you to approve {approval.tool}: "
                      f"/approve {approval.id} or /deny {approval.id} [reason]")
        self.from_thread(self.start, view)
        return cursor

    def read_more(self, cursor: str) -> str:
        """One blocking read of the room's log and events; the turn record and speak queue
        where an event changed them."""
        assert self.view is not None
        store = self.client.store
        messages, events = store.wait_room(self.room, self.view.seen_seq, cursor, FOLLOW_BLOCK_MS)
        if not (messages or events):
            return cursor
        decided = any(isinstance(e, TurnDecided) for e in events)
        turns = store.read_turns(self.room, last=1) if decided else []
        queue = (self.client.speak_queue(self.room) if self.view.follows_queue and any(
            isinstance(e, QueueChanged | TurnDecided) for e in events) else None)
        self.from_thread(self.take_in, messages, events, turns, queue)
        return events[-1].id if events else cursor

    def from_thread(self, callback: Any, *args: Any) -> None:
        """Run ``callback`` on the app's loop; nothing once the app is closing."""
        if self.closing.is_set():
            return
        try:
            self.call_from_thread(callback, *args)
        except RuntimeError:  # the app's loop is gone
            self.closing.set()

    # -- on the app's loop ------------------------------------------------------------

    def start(self, view: RoomView) -> None:
        """The room is loaded: its cards, and everything drawn."""
        self.view = view
        cards = self.query_one("#cards", VerticalScroll)
        cards.remove_children()
        cards.mount_all([Static("", id=f"card-{i}", classes="card", markup=False)
                         for i in range(len(view.cards))])
        self.say("", f"following room {self.room} ({view.kind})")

    def take_in(self, messages: list[Message], events: list[Event], turns: list[TurnRecord],
                queue: dict[str, Any] | None) -> None:
        """What the thread read, in the order it was written, then drawn."""
        assert self.view is not None
        pending = list(messages)
        for event in events:
            seq = getattr(event, "seq", None)
            if event.type == "message_committed" and seq is not None:
                while pending and pending[0].seq <= seq:
                    self.view.see_message(pending.pop(0))
            self.view.see_event(event)
        for message in pending:
            self.view.see_message(message)
        for record in turns:
            self.view.see_turn(record)
        if queue is not None:
            self.view.see_queue(queue)
        self.draw()

    def say(self, status: str, note: str) -> None:
        """Set the status line (empty: all is well) and add a note to the transcript."""
        self.query_one("#status", Static).update(status)
        if note and self.view is not None:
            self.view.note(note)
        self.draw()

    def draw(self) -> None:
        """Bring every widget up to the view."""
        view = self.view
        if view is None:
            return
        log = self.query_one("#transcript", RichLog)
        for line in view.lines[self.shown:]:
            log.write(Text(line.text, style=STYLES[line.kind]))
        self.shown = len(view.lines)
        self.query_one("#writing", Static).update("\n".join(view.writing_lines()))
        for i, name in enumerate(view.cards):
            for card in self.query(f"#card-{i}").results(Static):
                card.update(view.card_text(name))
        paused = " · paused" if view.paused else ""
        self.query_one("#floor", Static).update(view.floor_line() + paused)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Post the line, or run its command, off the app's loop."""
        line = event.value
        event.input.value = ""
        if line.strip():
            self.run_worker(partial(self.run_command, line), thread=True, group="commands")

    def run_command(self, line: str) -> None:
        """The line's command (or post) through the Client; its answer or refusal, noted."""
        try:
            answer = run_line(Console(self.client, self.room, self.me), line)
        except redis.RedisError as error:
            answer = unreachable_redis(self.client.settings.redis_url, error)
        except (ValueError, LookupError, PermissionError) as error:
            answer = str(error)
        if answer == QUIT:
            self.from_thread(self.exit)
        elif answer:
            self.from_thread(self.say, "", answer)
