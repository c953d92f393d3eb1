"""``parley replay``: a recorded run decided again under other policy settings."""

from __future__ import annotations

from typing import Annotated

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, print_json
from parley.cli.errors import friendly
from parley.coordinator.policies.what_if import parse_settings
from parley.views.terminal_text import terminal_text
from parley.views.what_if import replay_lines

app = typer.Typer()


@app.command()
@friendly
def replay(
    room: Annotated[str, typer.Argument(help="Room id")],
    changes: Annotated[list[str], typer.Option(
        "--set", help="A policy setting to replay under, as name=value (like "
        "threshold=0.7); give it once per setting")] = [],  # noqa: B006 (typer's way)
    run: Annotated[int | None, typer.Option("--run", help="The run to replay (the "
                                            "newest by default)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """What if: ROOM's recorded turns decided again under other settings, turn by turn,
    up to the first whose outcome differs. No model is called."""
    result = common.connect().replay(room, parse_settings(changes), run)
    if as_json:
        print_json(result.as_json())
        return
    for line in replay_lines(result):
        print(terminal_text(line))
