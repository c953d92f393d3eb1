"""A run as ``parley run`` and the demo show it: each message as it is committed, the line
of the turn that decided it underneath (``parley.views.explain``), and the run's end in
words with what to do next. Turns that posted nothing (a lull, a silent agent) get their
line where they fell."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from parley.client.results import RunResult
from parley.coordinator.policies import record_of
from parley.shared.models import Message, RoomSpec, TurnRecord
from parley.shared.store import RoomStore
from parley.views import documents, explain, terminal
from parley.views.terminal_text import terminal_text

INDENT = "    "


class RunPrinter:
    """Prints a room's messages with their turns' lines, reading the turn records (each
    committed with its message) as the messages come. Only turns after ``after_turn`` are
    shown: those of the run being waited for."""

    def __init__(self, console: Console, store: RoomStore, room: str, spec: RoomSpec,
                 after_turn: int = 0, hints: bool = True) -> None:
        self.console = console
        self.store = store
        self.room = room
        self.spec = spec
        self.after_turn = after_turn
        self.hints = hints  # what to do next: not for a room that is gone with its Redis
        self.cursor = "0-0"  # the last turns-stream entry read
        self.records: list[TurnRecord] = []  # every record of the run read so far
        self.pending: list[TurnRecord] = []  # read, not printed yet

    def message(self, message: Message) -> None:
        """Print ``message``, after the lines of turns that came before it, and its own
        turn's line under it."""
        self.read()
        turn = message.turn
        if turn is None:  # a person's post: after the turns decided before it was in the log
            self.flush(lambda record: record.snapshot_seq < message.seq)
        else:
            self.flush(lambda record: record.turn < turn)
        if not record_of(self.spec).scores_messages:
            # Only a policy that scores its messages shows it: the others are stored with 0.
            message = message.model_copy(update={"score": None})
        # The turn's line, under it, tells its tool calls.
        terminal.print_message(self.console, message, tools=turn is None)
        if turn is not None:
            self.flush(lambda record: record.turn == turn)

    def finish(self, result: RunResult) -> None:
        """The lines not printed yet (the turn that ended the run), then the end line."""
        self.read()
        self.flush(lambda record: True)
        asked = explain.people_asked(self.spec, self.store.read_state(self.room).floor_state)
        line = end_line(self.spec, result, self.records, self.hints, asked)
        self.console.print(f"[dim]{escape(terminal_text(line))}[/dim]", highlight=False,
                           soft_wrap=True)

    def read(self) -> None:
        """Take in the turn records committed since the last read."""
        for entry_id, record in self.store.read_turn_entries(self.room, self.cursor):
            self.cursor = entry_id
            if record.turn > self.after_turn:
                self.records.append(record)
                self.pending.append(record)

    def flush(self, due: Callable[[TurnRecord], bool]) -> None:
        """Print the line of each pending record that is ``due``, in turn order."""
        for record in [record for record in self.pending if due(record)]:
            self.pending.remove(record)
            earlier = self.records[:self.records.index(record)]
            text = explain.turn_line(self.spec, record, earlier).shown_alone()
            if not text:
                continue
            self.console.print(INDENT + terminal_text(text), style="dim", highlight=False,
                               markup=False, soft_wrap=True)


def end_line(spec: RoomSpec, result: RunResult, records: list[TurnRecord], hints: bool = True,
             asked: Sequence[str] = ()) -> str:
    """``room R · idle · stopped by lull: no bid cleared the 0.5 threshold · next: ...``
    (``asked``: the people a waiting room owes an answer, named in its next step)."""
    last = records[-1] if records else None
    stop = explain.stop_line(spec, result.stop_reason, result.stop_detail, last)
    steps = explain.next_steps(spec, result.stop_reason, result.room, asked) if hints else []
    line = f"room {result.room} · {result.status.value} · stopped by {stop}"
    return line + (f" · next: {'; '.join(steps)}" if steps else "")


def explained_json(spec: RoomSpec, result: RunResult, records: list[TurnRecord],
                   asked: Sequence[str] = ()) -> dict[str, Any]:
    """``parley run --json``'s object with the turns' facts and the stop in words."""
    last = records[-1] if records else None
    return {**documents.run_json(result),
            "stop_text": explain.stop_line(spec, result.stop_reason, result.stop_detail,
                                              last),
            "next": explain.next_steps(spec, result.stop_reason, result.room, asked),
            "turns": [explain.turn_line(spec, record, records[:index]).as_json()
                      for index, record in enumerate(records)]}


def turns_after(store: RoomStore, room: str, after_turn: int) -> list[TurnRecord]:
    """The room's turn records after turn ``after_turn``, oldest first."""
    return [record for record in store.read_turns(room) if record.turn > after_turn]
