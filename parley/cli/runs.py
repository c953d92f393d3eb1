"""``parley run`` and ``parley post``: start a run (or join one) and print it as it goes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NamedTuple

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, QuietFlag, print_json, read_spec
from parley.cli.errors import EXIT_RUN_FAILED, friendly
from parley.client.client import Client
from parley.shared.logs import configure_logging
from parley.shared.models import RoomSpec, RoomStatus
from parley.views import explain, run_printer, terminal
from parley.views.terminal_text import terminal_json, terminal_text

app = typer.Typer()


@app.command()
@friendly
def run(
    spec: Annotated[Path, typer.Argument(help="Room spec (YAML or JSON)")],
    task: Annotated[str, typer.Option("--task", "-t", help="The task, posted as message 1")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds")] = None,
    sender: Annotated[str, typer.Option("--as", help="Who posts the task")] = "User",
    quiet: QuietFlag = False,
) -> None:
    """Run TASK in a new room built from SPEC and print the conversation: under each
    message, the bids (or the policy's decision) of the turn that posted it; last, why the
    run ended and what to do next.

    Exits 1 when the run ends failed (the conversation or JSON object is printed first),
    2 on bad input, 3 when the run does not end within --timeout."""
    room_spec = read_spec(spec)
    configure_logging("console", "WARNING")
    client = common.connect()
    client.ping()
    room = client.create_room(room_spec)
    inbox_id = client.post(room, task, sender)
    print_run_of(client, room, inbox_id, RunOutput(room_spec, as_json, quiet), timeout)


class RunOutput(NamedTuple):
    """How a run is printed: the room's spec (its turns' lines need it), --json, --quiet,
    and the last turn before the run (only later turns are the run's)."""

    spec: RoomSpec
    as_json: bool
    quiet: bool
    after_turn: int = 0


def print_run_of(client: Client, room: str, inbox_id: str, how: RunOutput,
                 timeout: float | None) -> None:
    """Wait for the run the post ``inbox_id`` joined, printing it as it goes (or as one
    JSON object at its end); exit 1 when it ended failed."""
    if how.as_json:
        result = client.wait(room, inbox_id, timeout)
        records = run_printer.turns_after(client.store, room, how.after_turn)
        asked = explain.people_asked(how.spec, client.state(room).floor_state)
        print(terminal_json(run_printer.explained_json(how.spec, result, records, asked)))
    elif how.quiet:
        result = client.wait(room, inbox_id, timeout, on_message=lambda message:
                             terminal.print_message(common.console, message))
        terminal.print_run(common.console, result, printed=True)
    else:
        printer = run_printer.RunPrinter(common.console, client.store, room, how.spec,
                                         how.after_turn)
        result = client.wait(room, inbox_id, timeout, on_message=printer.message)
        printer.finish(result)
    if result.status is RoomStatus.FAILED:
        raise typer.Exit(EXIT_RUN_FAILED)


@app.command()
@friendly
def post(
    room: Annotated[str, typer.Argument(help="Room id")],
    content: Annotated[str, typer.Argument(help="What to say")],
    sender: Annotated[str, typer.Option("--as", help="Who says it")] = "User",
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run the post joined "
                                       "to end, and print it as parley run does")] = False,
    as_json: JsonFlag = False,
    timeout: Annotated[float | None, typer.Option(help="With --wait: give up after this "
                                                  "many seconds")] = None,
    quiet: QuietFlag = False,
) -> None:
    """Post a message into a room (starting a run if the room is idle).

    With --wait, exits as parley run does: 1 when the run ends failed, 3 on --timeout."""
    client = common.connect()
    if not wait:
        inbox_id = client.post(room, content, sender)
        if as_json:
            print_json({"room": room, "sender": sender, "inbox_id": inbox_id})
        else:
            print(terminal_text(f"posted to room {room} as {sender} (inbox entry {inbox_id})"))
        return
    configure_logging("console", "WARNING")
    state = client.state(room)
    how = RunOutput(client.store.read_spec(room)[1], as_json, quiet,
                    state.turn - 1 if state.turn_open else state.turn)
    print_run_of(client, room, client.post(room, content, sender), how, timeout)
