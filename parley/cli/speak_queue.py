"""The speak queue of a mention room: ``parley listen``, ``talk``, ``instruct``,
``regenerate`` and ``queue``."""

from __future__ import annotations

from typing import Annotated

import typer

from parley.cli import common
from parley.cli.errors import friendly
from parley.views.terminal_text import terminal_json, terminal_text

app = typer.Typer()


@app.command()
@friendly
def listen(room: Annotated[str, typer.Argument(help="A mention room's id")],
           agent: Annotated[str, typer.Argument(help="The agent that only listens")]) -> None:
    """An agent of a mention room only listens: it keeps its place in the speak queue and
    takes a turn only when a person names it."""
    common.connect().listen(room, agent)


@app.command()
@friendly
def talk(room: Annotated[str, typer.Argument(help="A mention room's id")],
         agent: Annotated[str, typer.Argument(help="The agent that talks again")]) -> None:
    """A listening agent of a mention room talks again (a wait for it ends)."""
    common.connect().talk(room, agent)


@app.command()
@friendly
def instruct(room: Annotated[str, typer.Argument(help="A mention room's id")],
             agent: Annotated[str, typer.Argument(help="The agent to instruct")],
             text: Annotated[str, typer.Argument(help="The instruction")]) -> None:
    """Queue AGENT at the front of a mention room for a turn on TEXT (given even while the
    room waits, to a listening agent, or to the agent that just spoke)."""
    common.connect().instruct(room, agent, text)


@app.command()
@friendly
def regenerate(room: Annotated[str, typer.Argument(help="A mention room's id")]) -> None:
    """Queue, at the front, each agent that answered the last person's message."""
    common.connect().regenerate(room)


@app.command()
@friendly
def queue(room: Annotated[str, typer.Argument(help="A mention room's id")],
          as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")
                             ] = False) -> None:
    """A mention room's speak queue: who speaks, who is owed a turn, who listens, who
    waits for a person's answer, whether the room waits and whether it is over."""
    view = common.connect().speak_queue(room)
    if as_json:
        print(terminal_json(view))
        return
    for name, value in view.items():
        shown = ", ".join(" asked ".join(pair) if isinstance(pair, list) else str(pair)
                          for pair in value) if isinstance(value, list) else value
        shown = terminal_text(str(shown)) if shown not in ("", None) else "-"
        common.console.print(f"{name}: {shown}", highlight=False, markup=False)
