"""What every command shares: the console it prints to, the Client it talks through, the
``--json`` and ``--quiet`` flags, and reading a spec file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from parley.cli.errors import spec_file_error
from parley.client.client import Client
from parley.client.spec_file import load_spec
from parley.shared.models import RoomSpec
from parley.shared.settings import get_settings
from parley.shared.spec_limits import SpecTooLarge
from parley.views.terminal import make_console
from parley.views.terminal_text import terminal_json

console = make_console()
QuietFlag = Annotated[bool, typer.Option("--quiet", "-q", help="The transcript only: no "
                                         "turn lines, the end as one short line")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object")]


def connect() -> Client:
    """The Client of the deployment this process's settings name."""
    return Client()


def read_spec(path: Path) -> RoomSpec:
    """Load a spec file for a room of this process's settings (its most agents), with load
    errors as CliError naming the file and field."""
    try:
        return load_spec(path, get_settings().max_agents)
    except (OSError, yaml.YAMLError, SpecTooLarge, ValidationError) as error:
        raise spec_file_error(path, error) from error


def print_json(value: Any) -> None:
    """One JSON object on one line."""
    print(terminal_json(value))
