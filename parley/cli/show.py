"""``parley turns``, ``parley status`` and ``parley transcript``: what a room holds, and the
rooms and coordinators as operators see them."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, print_json
from parley.cli.errors import friendly
from parley.client.client import Client
from parley.shared.models import RoomStatus, StopReason
from parley.shared.records import ZERO_TOTALS
from parley.shared.store import RoomNotFound
from parley.views import documents, terminal
from parley.views.terminal_text import terminal_json, terminal_text

app = typer.Typer()


@app.command()
@friendly
def turns(
    room: Annotated[str, typer.Argument(help="Room id")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document")] = False,
    last: Annotated[int | None, typer.Option(min=0, help="Only the newest N decided turns")
                    ] = None,
) -> None:
    """Show each turn's answers (scores raw and adjusted, status, latency, tokens) and, for
    the open turn, who has answered and who is still pending."""
    # The open turn is replayed by the coordinator's own code, which loads Celery's client.
    from parley.client.turn_report import read_turn_report

    store = common.connect().store
    report = read_turn_report(store, room, last)
    if as_json:
        print(terminal_json(documents.turns_json(report)))
    else:
        terminal.print_turns(common.console, report, store.read_spec(room)[1])


@app.command()
@friendly
def status(room: Annotated[str | None, typer.Argument(help="One room's details")] = None,
           limit: Annotated[int, typer.Option(help="Most rooms to list")] = 20,
           raw: Annotated[bool, typer.Option("--raw", help="With ROOM: its state fields as "
                                             "stored, as one JSON object")] = False) -> None:
    """Rooms and coordinators, as operators see them; with ROOM, what `parley rooms show`
    shows of it."""
    client = common.connect()
    store = client.store
    ttl = client.settings.lease_ttl_s
    if room is not None and not raw:
        terminal.print_room(common.console, client.show(room))
        return
    if room is not None:
        state = client.state(room)
        # The totals are shown from zero, also for rooms stored before they were kept.
        common.console.print_json(json.dumps({**ZERO_TOTALS, **state.raw,
                                              "lease": store.lease_holder(room),
                                              "streams": stream_caps(client, room)}))
        return
    rows = []
    failures = []
    for room_id in store.list_rooms(limit):
        try:
            state = store.read_state(room_id)
        except RoomNotFound:  # deleted or expired since it was listed
            continue
        rows.append({"room": room_id,
                     "status": terminal.status_text(state.status, state.paused),
                     "run": state.run,
                     "turn": state.turn, "last_seq": state.last_seq,
                     "stop_reason": state.stop_reason or "-",
                     "lease": store.lease_holder(room_id) or "-"})
        if state.stop_reason is StopReason.ROOM_ERROR and state.status is RoomStatus.FAILED:
            failures.append(f"room {room_id} failed after {state.failed_takes} take(s): "
                            f"{state.stop_detail}")
    common.console.print(terminal.rooms_table(rows))
    for line in failures:
        common.console.print(line, highlight=False, markup=False, soft_wrap=True)
    coordinators = store.coordinators()
    failing = store.scans_failing([coordinator_id for coordinator_id, _ in coordinators])
    for coordinator_id, age in coordinators:
        health = "live" if age < 3 * ttl else "vanished"
        line = f"coordinator {coordinator_id}: {health}, last heartbeat {age:.1f}s ago"
        if coordinator_id in failing:
            line += f", not ready: {failing[coordinator_id]}"
        common.console.print(line, highlight=False, markup=False, soft_wrap=True)


def stream_caps(client: Client, room: str) -> dict[str, dict[str, Any]]:
    """Each of the room's streams: its length and its cap (``None``: never trimmed)."""
    return {name: report.model_dump(exclude={"first_seq"})
            for name, report in client.stream_report(room).items()}


@app.command()
@friendly
def transcript(
    room: Annotated[str, typer.Argument(help="Room id")],
    output_type: Annotated[str, typer.Option(
        "--output-type", "-o", help="text (the whole conversation, one message a line), or "
        "one of GroupChat's output types: str, json, list, dict, final, yaml ...")] = "text",
    as_json: JsonFlag = False,
) -> None:
    """Print a room's conversation."""
    client = common.connect()
    if as_json:
        client.state(room)  # RoomNotFound for a room that is not there
        print_json({"room": room,
                    "messages": [documents.message_json(m) for m in client.messages(room)]})
        return
    formatted = client.transcript(room, output_type)
    # swarms' string formats keep their line breaks: the text form marks a message's own.
    print(terminal_text(formatted, continuation="") if isinstance(formatted, str)
          else terminal_json(formatted))

