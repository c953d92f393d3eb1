"""``parley follow`` and ``parley events``: a room's messages and events as they are written."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from parley.cli import common
from parley.cli.errors import bad_event_id, bad_event_type, friendly
from parley.shared.events import MessageChunk, event_type_named
from parley.shared.models import Message
from parley.views import documents, terminal
from parley.views.terminal_text import CONTINUATION, terminal_json, terminal_text

app = typer.Typer()


@app.command()
@friendly
def follow(room: Annotated[str, typer.Argument(help="Room id")],
           after: Annotated[int, typer.Option(help="Start after this seq")] = 0,
           live: Annotated[bool, typer.Option(
               "--live", help="Also print each message as it is written, before it is "
                              "committed")] = False) -> None:
    """Print a room's messages as they are committed, and each run's end (Ctrl-C to
    stop)."""
    client = common.connect()
    client.state(room)
    writing = LiveText()
    try:
        for item in client.timeline(room, after, **({"chunks": True} if live else {})):
            if isinstance(item, MessageChunk):
                writing.show(item)
                continue
            writing.end()
            if isinstance(item, Message):
                terminal.print_message(common.console, item)
            else:
                terminal.print_run_end(common.console, item)
    except KeyboardInterrupt:
        pass


class LiveText:
    """``parley follow --live``: a message being written, on a line of its own as its
    chunks come; the committed message is printed after it as usual (it is the truth: a
    call that failed midway leaves its line unfinished, and nothing is committed)."""

    def __init__(self) -> None:
        self.open: tuple[int, int, str] | None = None  # the (turn, phase, agent) shown

    def show(self, chunk: MessageChunk) -> None:
        """Print a chunk, after a header when it starts another call's text."""
        key = (chunk.turn, chunk.phase, chunk.agent)
        if key != self.open or chunk.index == 0:
            self.end()
            common.console.print(f"... {terminal_text(chunk.agent)}: ", end="", style="dim",
                                 highlight=False, markup=False)
            self.open = key
        common.console.print(terminal_text(chunk.text, CONTINUATION), end="", style="dim",
                             highlight=False, markup=False, soft_wrap=True)

    def end(self) -> None:
        """End the line of the text being shown, if any."""
        if self.open is not None:
            common.console.print()
            self.open = None


# A stream id as Redis reads it: milliseconds, and optionally -sequence.
_STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?\Z")


@app.command()
@friendly
def events(
    room: Annotated[str, typer.Argument(help="Room id")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line")] = False,
    after: Annotated[str, typer.Option(help="Start after this event id")] = "0-0",
    keep_following: Annotated[bool, typer.Option(
        "--follow/--no-follow", help="Wait for new events (Ctrl-C to stop)")] = True,
    until: Annotated[str | None, typer.Option(help="Stop after the first event of this type "
                                              "(e.g. run_ended)")] = None,
) -> None:
    """Print a room's events (runs, messages, turns, answers, leases) as they are written,
    from the oldest kept or after --after ID."""
    if not _STREAM_ID.fullmatch(after):
        raise bad_event_id(after)
    try:
        last_type = event_type_named(until) if until else None
    except ValueError as error:
        raise bad_event_type(error) from None
    client = common.connect()
    try:
        for event in client.events(room, after, follow=keep_following):
            if as_json:
                print(terminal_json(documents.event_json(event)), flush=True)
            else:
                common.console.print(terminal.event_line(event), highlight=False,
                                     markup=False, soft_wrap=True)
            if event.type == last_type:
                break
    except KeyboardInterrupt:
        pass
