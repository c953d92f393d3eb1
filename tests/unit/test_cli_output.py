"""What the CLI prints: piped output is never wrapped, ``parley status`` never cuts an id,
and a message's text is printed as written, brackets included."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.models import Message
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from parley.views import terminal as output
from tests.support.rooms import scripted_spec

LONG_ID = "quarterly-planning-for-the-platform-team-" + "x" * 60
LONG_TEXT = " ".join(f"word{i}" for i in range(80))


class Terminal(io.StringIO):
    """A buffer that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_piped_console_never_wraps_a_message_whatever_columns_says(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    piped = io.StringIO()

    output.print_message(output.make_console(piped), Message(seq=2, sender="Skeptic",
                                                             content=LONG_TEXT, score=0.5))

    assert piped.getvalue() == f"  2 Skeptic (score 0.50): {LONG_TEXT}\n"


def test_a_terminal_console_fits_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    terminal = Terminal()

    console = output.make_console(terminal)
    output.print_message(console, Message(seq=2, sender="Skeptic", content=LONG_TEXT))

    assert console.width == 40
    assert len(terminal.getvalue().splitlines()) > 10  # wrapped to the terminal


def test_a_message_is_printed_as_written_not_as_markup():
    piped = io.StringIO()
    content = "use [bold]x[/bold] or [/] and [red] literally"

    output.print_message(output.make_console(piped), Message(seq=3, sender="A", content=content))

    assert piped.getvalue() == f"  3 A: {content}\n"


ROWS = [{"room": LONG_ID, "status": "running", "run": 1, "turn": 12, "last_seq": 30,
         "stop_reason": "-", "lease": "coordinator-on-host-a-12345:7"},
        {"room": "short", "status": "idle", "run": 2, "turn": 3, "last_seq": 4,
         "stop_reason": "all_agents_failed", "lease": "-"}]


def column(printed: str, index: int) -> str:
    """The text of a table's column ``index``, its body's lines joined without spaces."""
    body = printed.split("┩\n", 1)[1].splitlines()[:-1]
    return "".join(line.split("│")[index + 1].strip() for line in body)


@pytest.mark.parametrize("width", [60, 100, 250])
def test_the_rooms_table_never_cuts_an_id_on_a_narrow_terminal(width):
    screen = Console(file=io.StringIO(), width=width)

    screen.print(output.rooms_table(ROWS))

    printed = screen.file.getvalue()  # type: ignore[attr-defined]
    assert column(printed, 0) == LONG_ID + "short"
    assert column(printed, 6) == "coordinator-on-host-a-12345:7-"
    assert (LONG_ID in printed) == (width == 250)


def test_parley_status_piped_shows_every_id_whole(monkeypatch, fake_redis):
    monkeypatch.setenv("COLUMNS", "50")
    client = Client(Settings(key_prefix="t"))
    client.redis = fake_redis
    client.store = RoomStore(fake_redis, Keys("t"))
    client.store.create_room(LONG_ID, scripted_spec({"A": [], "B": []}))
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    monkeypatch.setattr(cli.common, "console", output.make_console())

    result = CliRunner().invoke(cli.app, ["status"])

    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if LONG_ID in line]
    assert "idle" in row


def test_help_rewraps_each_paragraph_and_labels_no_flag_with_a_type(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    result = CliRunner().invoke(cli.app, ["run", "--help"], terminal_width=100)

    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert "  --json             Print one JSON object\n" in result.output
    # The docstring's second paragraph, broken after "first)," in the source, reads on.
    lines = [line.strip() for line in result.output.splitlines()]
    assert not [line for line in lines if line.endswith("printed first),")]
    assert " ".join(lines).count("(the conversation or JSON object is printed first), 2 on "
                                 "bad input") == 1
