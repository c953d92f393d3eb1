"""``parley schema``: the room spec's JSON Schema, for editors and validators."""

from __future__ import annotations

import sys

import typer

from parley.shared.spec_schema import room_spec_schema_text

app = typer.Typer()


@app.command()
def schema() -> None:
    """Print the room spec's JSON Schema (draft 2020-12): each field with its description,
    default and bounds. Point an editor at it with a first line
    `# yaml-language-server: $schema=<path or URL of the file>` in a spec."""
    sys.stdout.write(room_spec_schema_text())
