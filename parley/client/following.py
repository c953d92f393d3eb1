"""Following a room as it changes: its messages and the ends of its runs, read by blocking
on the room's log and events streams together rather than by polling its state."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from parley.shared.events import Event, MessageChunk, MessageCommitted, RunEnded
from parley.shared.models import Message, RoomStatus, StopReason
from parley.shared.records import RoomState
from parley.shared.store import RoomStore

# While a run goes on, its waiter reads the room's state at least this often: the events
# alone cannot tell of a post set aside unread, nor of events trimmed before it read them.
STATE_CHECK_S = 1.0


def stream_id(value: str) -> tuple[int, int]:
    """A stream entry id as a pair that orders like the ids do."""
    millis, _, sequence = value.partition("-")
    return int(millis), int(sequence or 0)


def failed_while_waiting(state: RoomState, inbox_id: str) -> bool:
    """True when the room ended failed on its errors with the post ``inbox_id`` still in
    its inbox, i.e. after that post (a failure before it saw only older inbox ids)."""
    return (state.status is RoomStatus.FAILED and state.stop_reason is StopReason.ROOM_ERROR
            and stream_id(state.failed_inbox_id) >= stream_id(inbox_id))


@dataclass(frozen=True)
class RunEnd:
    """How a run ended."""

    status: RoomStatus
    stop_reason: StopReason | None
    stop_detail: str
    answer: str | None

    @classmethod
    def of_state(cls, state: RoomState) -> RunEnd:
        """The end the room's state shows."""
        return cls(state.status, state.stop_reason, state.stop_detail, state.answer)

    @classmethod
    def of_event(cls, event: RunEnded) -> RunEnd:
        """The end a ``run_ended`` event tells."""
        return cls(event.status, event.stop_reason, event.stop_detail or "", event.answer)


class PostWatch:
    """Which run a post joined and how that run ended, as the room's state and events tell.

    A ``message_committed`` event naming the post's inbox id (or a later one: drain takes
    posts in order) gives the run it joined; that run's ``run_ended`` event is its end. A
    state read settles what the events cannot: a post set aside unread, or a room that
    failed (``room_error``) before it drained the post.
    """

    def __init__(self, inbox_id: str) -> None:
        self.inbox_id = inbox_id
        self.run: int | None = None  # the run the post joined, once known
        self.picked_up = False
        self.ended: RunEnd | None = None

    def see_state(self, state: RoomState) -> None:
        """Take in a read of the room's state."""
        if failed_while_waiting(state, self.inbox_id):
            self.ended = RunEnd.of_state(state)
        elif stream_id(state.inbox_last_id) >= stream_id(self.inbox_id):
            self.picked_up = True
            if state.status is not RoomStatus.RUNNING:
                self.ended = RunEnd.of_state(state)
            elif self.run is None:
                self.run = state.run

    def see_event(self, event: Event) -> bool:
        """Take in one event; True when only the state can tell what it means for the post
        (a run ended before the post's run was known)."""
        if isinstance(event, MessageCommitted):
            if self.run is None and event.inbox_id is not None and (
                    stream_id(event.inbox_id) >= stream_id(self.inbox_id)):
                self.run, self.picked_up = event.run, True
        elif isinstance(event, RunEnded):
            if self.run is None:
                return True
            if event.run >= self.run:
                self.ended = RunEnd.of_event(event)
        return False


class RunWaiter:
    """Waits for the end of the run a post joined, handing every message of the room to
    ``on_message`` on the way (each once, in seq order), and to ``on_chunk`` each
    ``message_chunk`` event (a message as it is written) in its place among them."""

    def __init__(self, store: RoomStore, room: str, inbox_id: str,
                 on_message: Callable[[Message], None] | None = None,
                 on_chunk: Callable[[MessageChunk], None] | None = None) -> None:
        self.store = store
        self.room = room
        self.on_message = on_message
        self.on_chunk = on_chunk
        self.seen = 0  # the last seq handed to on_message
        self.watch = PostWatch(inbox_id)
        # The state and the events after it are read together: nothing falls in between.
        self.state, self.cursor = store.state_and_last_event(room)
        self.checked = time.monotonic()
        self.watch.see_state(self.state)

    @property
    def ended(self) -> RunEnd | None:
        """How the post's run ended, once it has."""
        return self.watch.ended

    @property
    def picked_up(self) -> bool:
        """True once the post left the inbox."""
        return self.watch.picked_up

    def step(self, block_ms: int) -> None:
        """One blocking read of the room's log and events (up to ``block_ms``): hand on its
        messages, take in its events, and read the state when they cannot tell enough (or
        when it was last read ``STATE_CHECK_S`` ago)."""
        messages, events = self.store.wait_room(self.room, self.seen, self.cursor, block_ms)
        unclear = not (messages or events) or time.monotonic() - self.checked >= STATE_CHECK_S
        for event in events:
            # Messages and chunks in the order they were written: a message's chunks first.
            if isinstance(event, MessageCommitted):
                self.deliver([message for message in messages if message.seq <= event.seq])
            elif isinstance(event, MessageChunk) and self.on_chunk is not None:
                self.on_chunk(event)
            self.cursor = event.id
            unclear = self.watch.see_event(event) or unclear
        self.deliver(messages)
        if unclear and self.ended is None:
            self.read_state()

    def read_state(self) -> RoomState:
        """Read the room's state and take it in."""
        self.state, self.checked = self.store.read_state(self.room), time.monotonic()
        self.watch.see_state(self.state)
        return self.state

    def deliver(self, messages: list[Message]) -> None:
        """Hand on the messages not handed on yet."""
        for message in messages:
            if message.seq > self.seen:
                self.seen = message.seq
                if self.on_message is not None:
                    self.on_message(message)

    def finish(self) -> list[Message]:
        """Every message of the room, those not handed on yet handed on now."""
        messages = self.store.read_messages(self.room)
        self.deliver(messages)
        return messages


def timeline(store: RoomStore, room: str, after_seq: int = 0, block_ms: int = 1000,
             chunks: bool = False) -> Iterator[Message | RunEnded | MessageChunk]:
    """The room's messages after ``after_seq``, then each message and each run's end in the
    order they were committed (with ``chunks``, each message_chunk event too, before its
    message), forever (stop iterating to end); each wait blocks up to ``block_ms``."""
    _, cursor = store.state_and_last_event(room)
    while True:
        messages, events = store.wait_room(room, after_seq, cursor, block_ms)
        if events:
            cursor = events[-1].id
        for item in in_commit_order(messages, events, chunks):
            if isinstance(item, Message):
                after_seq = item.seq
            yield item


def in_commit_order(messages: list[Message], events: list[Event], chunks: bool = False
                    ) -> list[Message | RunEnded | MessageChunk]:
    """Messages and the runs' ends among ``events`` (and, with ``chunks``, the message_chunk
    events), read together, in the order they were committed: each ``message_committed``
    event places the messages up to its seq, and the messages no event places (committed
    before the first event) come first."""
    pending = list(messages)
    placed: list[Message | RunEnded | MessageChunk] = []

    def place_upto(seq: float) -> None:
        while pending and pending[0].seq <= seq:
            placed.append(pending.pop(0))

    committed = [event.seq for event in events if isinstance(event, MessageCommitted)]
    place_upto(min(committed, default=float("inf")) - 1)
    for event in events:
        if isinstance(event, MessageCommitted):
            place_upto(event.seq)
        elif isinstance(event, RunEnded) or (chunks and isinstance(event, MessageChunk)):
            placed.append(event)
    place_upto(float("inf"))
    return placed


def follow_events(store: RoomStore, room: str, after: str = "0-0", block_ms: int = 1000
                  ) -> Iterator[Event]:
    """The room's events after the id ``after``, then each as it is written, forever."""
    while True:
        for event in store.wait_events(room, after, block_ms):
            after = event.id
            yield event
