"""``parley console``: a full-screen terminal on a room (the discussion console)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from parley.cli import common
from parley.cli.errors import file_error, friendly
from parley.shared.models import SEED_SENDER
from parley.views.terminal_text import terminal_text

app = typer.Typer()


@app.command()
@friendly
def console(
    room: Annotated[str, typer.Argument(help="Room id")],
    me: Annotated[str, typer.Option("--as", help="Who you post as")] = SEED_SENDER,
    log_file: Annotated[Path | None, typer.Option(
        "--log-file", help="Where logs go while the screen is up (without one, warnings "
        "are held and printed once it closes)")] = None,
) -> None:
    """A full-screen terminal on ROOM: its messages, a card per agent, the floor, and
    your input (posted as --as NAME; /help lists the commands)."""
    from parley.console.app import DiscussionConsole  # Textual loads only for the console

    client = common.connect()
    client.store.read_spec(room)  # an unknown room is one line, before the screen
    with logs_kept(log_file):
        DiscussionConsole(client, room, me).run()


class HeldWarnings(logging.Handler):
    """Warnings held while the screen is up, printed once it closes."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.held: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Hold the record's line."""
        self.held.append(self.format(record))


@contextmanager
def logs_kept(path: Path | None) -> Iterator[None]:
    """Every log record to ``path`` while the screen is up (or warnings held and printed
    after it), none to the terminal the screen draws on."""
    root = logging.getLogger()
    try:
        handler: logging.Handler = (logging.FileHandler(path) if path is not None
                                    else HeldWarnings())
    except OSError as error:
        raise file_error("write log file", path or Path(), error) from None
    before, level = root.handlers, root.level
    root.handlers, root.level = [handler], min(root.level or logging.WARNING, logging.INFO)
    try:
        yield
    finally:
        root.handlers, root.level = before, level
        handler.close()
        for line in getattr(handler, "held", []):
            print(terminal_text(line), file=sys.stderr)
