"""The ``parley`` command: one module per command group, its error wording in errors.py.

==============  ================================================================
module          commands
==============  ================================================================
runs            run, post
speak_queue     listen, talk, instruct, regenerate, queue
follow          follow, events
show            turns, status, transcript
replay          replay
console         console
approvals       approve, approvals
tools           tools
schema          schema
services        coordinator, worker, health, api
demo            demo
rooms           rooms create, list, show, pause, resume, cancel, delete, archive,
                import
tasks           task start, list, cancel
token           token new
==============  ================================================================
"""

from __future__ import annotations

from typing import Annotated

import typer

from parley.cli import (
    approvals,
    console,
    demo,
    follow,
    replay,
    rooms,
    runs,
    schema,
    services,
    show,
    speak_queue,
    tasks,
    token,
    tools,
)
from parley.version import package_version

# Click's plain help: it rewraps each paragraph to the terminal (Rich's keeps the
# docstrings' line breaks after the first) and labels no flag with a <bool> type.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Group chats of LLM agents: one speaker per turn, across processes.")
# In this order in --help; the groups' commands are the app's own (no group name), but rooms.
for group in (runs, speak_queue, follow, console, show, replay, approvals, tools, schema, services,
              demo):
    app.add_typer(group.app)
app.add_typer(rooms.app, name="rooms")
app.add_typer(tasks.app, name="task")
app.add_typer(token.app, name="token")


def print_version(asked: bool) -> None:
    """``--version``: print the version and exit before any command runs."""
    if asked:
        print(f"parley {package_version()}")
        raise typer.Exit()


@app.callback()
def options(
    version: Annotated[bool, typer.Option("--version", callback=print_version, is_eager=True,
                                          help="Print parley's version and exit")] = False,
) -> None:
    """Group chats of LLM agents: one speaker per turn, across processes."""


def main() -> None:
    """Entry point of the ``parley`` console script."""
    app(prog_name="parley")


if __name__ == "__main__":
    main()
