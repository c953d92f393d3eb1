"""``parley approve`` and ``parley approvals``: the tool calls that wait for a person."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, print_json
from parley.cli.errors import friendly
from parley.shared.approvals import Approval, describe_call
from parley.shared.models import SEED_SENDER
from parley.views.documents import approval_json
from parley.views.terminal_text import terminal_text

app = typer.Typer()


@app.command()
@friendly
def approve(
    room: Annotated[str, typer.Argument(help="Room id")],
    approval: Annotated[str, typer.Argument(help="The approval's id (or a unique start of "
                                            "it), as parley approvals lists it")],
    deny: Annotated[bool, typer.Option("--deny", help="Deny the tool call instead")] = False,
    by: Annotated[str, typer.Option("--as", help="Who answers: one of the room's "
                                    "approvers")] = SEED_SENDER,
    reason: Annotated[str, typer.Option("--reason", help="Why (the model is told a "
                                        "denial's reason)")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Approve (or, with --deny, deny) a tool call waiting for a person in ROOM."""
    answered = common.connect().approve(room, approval, not deny, by, reason)
    if as_json:
        print_json({"room": room, **approval_json(answered)})
        return
    print(terminal_text(f"{answered.status.value} {describe_call(answered.tool, answered.arguments)}"
                        f" in room {room} as {answered.by}"))


@app.command()
@friendly
def approvals(room: Annotated[str, typer.Argument(help="Room id")],
              as_json: JsonFlag = False) -> None:
    """The tool calls waiting for an approver in ROOM: id, agent, call, and how long."""
    pending = common.connect().approvals(room)
    if as_json:
        print_json({"room": room, "approvals": [approval_json(a) for a in pending]})
        return
    if not pending:
        print(f"no tool call waits for approval in room {room}")
        return
    for line in approval_lines(pending, time.time()):
        print(terminal_text(line))


def approval_lines(pending: list[Approval], now: float) -> list[str]:
    """One line per pending approval: id, agent, the call, how long it has waited and
    how long it may still."""
    return [f"{a.id}  {a.agent}  {describe_call(a.tool, a.arguments)}  waiting "
            f"{now - a.requested_at:.0f}s ({max(0.0, a.expires_at - now):.0f}s left)"
            for a in pending]
