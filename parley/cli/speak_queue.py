"""The speak queue of a mention room: ``parley listen``, ``talk``, ``instruct``,
``regenerate`` and ``queue``."""

from __future__ import annotations

from typing import Annotated

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, print_json
from parley.cli.errors import friendly
from parley.views.terminal_text import terminal_text

app = typer.Typer()


def report_change(room: str, op: str, agent: str, change_id: str, as_json: bool,
                  done: str) -> None:
    """A speak-queue change's one line (or JSON object): what was queued, and its id."""
    if as_json:
        print_json({"room": room, "op": op, "agent": agent or None, "change": change_id})
    else:
        print(terminal_text(f"room {room}: {done} (change {change_id})"))


@app.command()
@friendly
def listen(room: Annotated[str, typer.Argument(help="A mention room's id")],
           agent: Annotated[str, typer.Argument(help="The agent that only listens")],
           as_json: JsonFlag = False) -> None:
    """An agent of a mention room only listens: it keeps its place in the speak queue and
    takes a turn only when a person names it."""
    change_id = common.connect().listen(room, agent)
    report_change(room, "listen", agent, change_id, as_json,
                  f"{agent} only listens from its next turn (a person naming it gives it one)")


@app.command()
@friendly
def talk(room: Annotated[str, typer.Argument(help="A mention room's id")],
         agent: Annotated[str, typer.Argument(help="The agent that talks again")],
         as_json: JsonFlag = False) -> None:
    """A listening agent of a mention room talks again (a wait for it ends)."""
    change_id = common.connect().talk(room, agent)
    report_change(room, "talk", agent, change_id, as_json, f"{agent} talks again")


@app.command()
@friendly
def instruct(room: Annotated[str, typer.Argument(help="A mention room's id")],
             agent: Annotated[str, typer.Argument(help="The agent to instruct")],
             text: Annotated[str, typer.Argument(help="The instruction")],
             as_json: JsonFlag = False) -> None:
    """Queue AGENT at the front of a mention room for a turn on TEXT (given even while the
    room waits, to a listening agent, or to the agent that just spoke)."""
    change_id = common.connect().instruct(room, agent, text)
    report_change(room, "instruct", agent, change_id, as_json,
                  f"{agent} queued at the front for a turn on the instruction")


@app.command()
@friendly
def regenerate(room: Annotated[str, typer.Argument(help="A mention room's id")],
               as_json: JsonFlag = False) -> None:
    """Queue, at the front, each agent that answered the last person's message."""
    change_id = common.connect().regenerate(room)
    report_change(room, "regenerate", "", change_id, as_json, "each agent that answered "
                  "the last person's message queued at the front")


@app.command()
@friendly
def queue(room: Annotated[str, typer.Argument(help="A mention room's id")],
          as_json: JsonFlag = False) -> None:
    """A mention room's speak queue: who speaks, who is owed a turn, who listens, who
    waits for a person's answer, whether the room waits and whether it is over."""
    view = common.connect().speak_queue(room)
    if as_json:
        print_json(view)
        return
    for name, value in view.items():
        shown = ", ".join(" asked ".join(pair) if isinstance(pair, list) else str(pair)
                          for pair in value) if isinstance(value, list) else value
        shown = terminal_text(str(shown)) if shown not in ("", None) else "-"
        common.console.print(f"{name}: {shown}", highlight=False, markup=False)
