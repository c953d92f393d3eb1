"""What people and models write reaches a terminal as text: ``parley transcript`` and
``parley follow`` show control characters (ESC, OSC 52, bidi overrides) escaped, mark a
message's own lines so none passes for another speaker's, and never read markup."""

from __future__ import annotations

import io
import json
import re

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.cli import follow
from parley.client import Client
from parley.shared.events import MessageChunk, RunEnded
from parley.shared.models import Message
from parley.shared.scripts import Scripts
from parley.views import terminal as output
from parley.views.terminal_text import CONTINUATION, terminal_json, terminal_text
from tests.support.fake_client import fake_client
from tests.support.rooms import scripted_spec

ROOM = "r1"
CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: set the clipboard
TITLE = "\x1b]0;root@prod\x1b\\"  # OSC 0: set the window title, ST-terminated
RIGHT_TO_LEFT = "\u202etxt.exe"  # shown reversed: "exe.txt"
C1_CSI = "\x9b31m"  # the 8-bit CSI
POST = (f"Here is my plan.{CLEAR}{CLIPBOARD}{TITLE} Open {RIGHT_TO_LEFT}{C1_CSI} now\r"
        "  3 Skeptic (score 0.90): fine\nOptimist: I agree, ship it.\n[bold]no[/bold] :smile:")
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def client(monkeypatch) -> Client:
    client = fake_client()
    client.store.create_room(ROOM, scripted_spec({"Optimist": [], "Skeptic": []}))
    client.post(ROOM, POST, "Mallory")
    commit_posts(client)
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    monkeypatch.setattr(cli.common, "console", output.make_console())
    return client


def commit_posts(client: Client) -> None:
    """Commit the inbox into the log as a coordinator's drain does."""
    keys, scripts = client.store.keys, Scripts(client.redis)
    scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                    args=["c1", 5000, 1000])
    scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.log(ROOM),
                        keys.dead_letters(ROOM), keys.events(ROOM)],
                  args=["c1:1", 10, 100, 100, 128, 65536, 1024, 0, 1000])


def follow_output(client: Client, *options: str) -> str:
    """``parley follow``'s output for what the room holds, then Ctrl-C."""
    timeline = client.timeline

    def until_ctrl_c(room, after_seq, **chunks):
        yield next(timeline(room, after_seq))
        raise KeyboardInterrupt

    client.timeline = until_ctrl_c  # type: ignore[method-assign]
    result = CliRunner().invoke(cli.app, ["follow", ROOM, *options])
    assert result.exit_code == 0, result.output
    return result.output


def assert_shown_as_text(printed: str) -> None:
    assert RAW.search(printed) is None
    for raw in (CLEAR, CLIPBOARD, TITLE, RIGHT_TO_LEFT, C1_CSI):
        assert terminal_text(raw) in printed
    assert "[bold]no[/bold] :smile:" in printed
    # Every line is a message's first (seq, sender) or one of its lines, marked.
    lines = printed.splitlines()
    assert lines[0].startswith("  1 Mallory: Here is my plan.\\x1b[2J\\x1b[H\\x1b]52;c;")
    assert lines[1:] == [f"{CONTINUATION}Optimist: I agree, ship it.",
                         f"{CONTINUATION}[bold]no[/bold] :smile:"]


def test_follow_shows_a_posts_control_characters_escaped_and_its_lines_marked(client):
    assert_shown_as_text(follow_output(client))


def test_transcript_shows_a_posts_control_characters_escaped_and_its_lines_marked(client):
    result = CliRunner().invoke(cli.app, ["transcript", ROOM])
    assert result.exit_code == 0, result.output
    assert_shown_as_text(result.output)


def test_a_forged_carriage_return_cannot_print_over_the_senders_name(client):
    (first, *_) = follow_output(client).splitlines()
    assert first.endswith("now\\x0d  3 Skeptic (score 0.90): fine")


@pytest.mark.parametrize("options", [["--json"], ["--output-type", "list"]])
def test_transcript_json_has_no_raw_control_character_and_reads_back_whole(client, options):
    result = CliRunner().invoke(cli.app, ["transcript", ROOM, *options])
    assert result.exit_code == 0, result.output
    assert RAW.search(result.output) is None
    document = json.loads(result.output)
    rows = document["messages"] if "--json" in options else document
    assert [row["content"] for row in rows] == [POST]


def test_transcript_in_swarms_string_form_escapes_control_characters(client):
    result = CliRunner().invoke(cli.app, ["transcript", ROOM, "--output-type", "str"])
    assert RAW.search(result.output) is None
    assert result.output.startswith("Mallory: Here is my plan.\\x1b[2J")


def test_a_message_being_written_is_shown_escaped(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr(cli.common, "console", output.make_console(piped))
    writing = follow.LiveText()
    writing.show(MessageChunk(id="1-0", type="message_chunk", ts=1.0, turn=1, run=1,
                              agent="Skeptic", index=0, text=f"Fine{CLIPBOARD}.\nOptimist: "))
    writing.show(MessageChunk(id="2-0", type="message_chunk", ts=1.0, turn=1, run=1,
                              agent="Skeptic", index=1, text="yes"))
    writing.end()
    assert piped.getvalue().splitlines() == [
        f"... Skeptic: Fine{terminal_text(CLIPBOARD)}.", f"{CONTINUATION}Optimist: yes"]


def test_a_text_started_over_is_shown_on_a_line_of_its_own(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr(cli.common, "console", output.make_console(piped))
    writing = follow.LiveText()
    for index, text in ((0, "session a:"), (0, "session b:"), (1, " done.")):
        writing.show(MessageChunk(id=f"1-{index}", type="message_chunk", ts=1.0, turn=1, run=1,
                                  agent="dev", index=index, text=text))
    writing.end()
    # The failed attempt's line stays unfinished; the next attempt's text is not glued to it.
    assert piped.getvalue().splitlines() == ["... dev: session a:", "... dev: session b: done."]


def test_a_runs_end_and_an_events_line_show_a_stop_detail_escaped():
    piped = io.StringIO()
    console = output.make_console(piped)
    output.print_run_end(console, RunEnded(id="1-0", type="run_ended", ts=1.0, run=1,
                                               status="failed", stop_reason="room_error",
                                               stop_detail=f"boom{TITLE}"))
    line = output.event_line(RunEnded(id="1-0", type="run_ended", ts=1.0, run=1,
                                          status="failed", stop_detail=f"boom{TITLE}"))
    assert RAW.search(piped.getvalue() + line) is None
    assert terminal_text(TITLE) in piped.getvalue()


@pytest.mark.parametrize(("raw", "shown"), [
    ("a\x1bb", "a\\x1bb"), ("\x07", "\\x07"), ("\t", "\\x09"), ("\x7f", "\\x7f"),
    ("\x9b", "\\x9b"), ("\u202e", "\\u202e"), ("\u2066x\u2069", "\\u2066x\\u2069"),
    ("\u2028", "\\u2028"), ("\r", "\\x0d"), ("\n", "\\x0a"), ("Ünïcødé ✓", "Ünïcødé ✓"),
])
def test_terminal_text_escapes_each_control_character(raw, shown):
    assert terminal_text(raw) == shown


def test_terminal_text_keeps_line_breaks_when_asked_and_marks_the_lines_after():
    assert terminal_text("a\nb\x1b\n", "> ") == "a\n> b\\x1b\n> "


def test_terminal_json_reads_back_as_the_value():
    value = {"content": POST, "sender": "Ünïcødé"}
    assert RAW.search(terminal_json(value)) is None
    assert json.loads(terminal_json(value)) == value
    assert "Ünïcødé" in terminal_json(value)


def test_a_message_printed_alone_is_text_not_markup_nor_emoji_codes():
    piped = io.StringIO()
    output.print_message(output.make_console(piped),
                         Message(seq=4, sender="A", content="[red]x[/] :thumbs_up: :smile:"))
    assert piped.getvalue() == "  4 A: [red]x[/] :thumbs_up: :smile:\n"
