"""How a tool call is told: one line, ``Investigator used search_logs(service=checkout) → 12
lines``, under the turn that made it (``parley run``, ``parley turns``) and under the
message written from it (``parley follow``, ``parley transcript``); the records in
``parley turns --json``. On fakeredis, the message committed as a coordinator commits it."""

from __future__ import annotations

import io
import json

import fakeredis
import pytest
from rich.console import Console
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.models import Message, ToolCallStatus
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from parley.views import terminal
from parley.views.explain import turn_line
from parley.views.run_printer import RunPrinter
from parley.views.tool_calls import tool_call_line
from parley.views.transcript import transcript_text
from tests.support.tool_messages import commit_tool_message_now, incident_spec, tool_call

ROOM = "incident-1"
LOGS = "\n".join(f"10:0{i} checkout ERROR card declined" for i in range(9)) + "\n10:09\n10:10\n10:11"


@pytest.mark.parametrize(("update", "told"), [
    ({"result": LOGS}, "Investigator used search_logs(service=checkout) → 12 lines"),
    ({"result": "p99 is 2.3s"}, "Investigator used search_logs(service=checkout) → 11 chars"),
    ({"result": ""}, "Investigator used search_logs(service=checkout) → empty"),
    ({"status": ToolCallStatus.ERROR, "result": "ToolError: no such service"},
     "Investigator used search_logs(service=checkout) → error"),
    ({"status": ToolCallStatus.TIMEOUT}, "Investigator used search_logs(service=checkout) → "
                                         "timed out"),
    ({"status": ToolCallStatus.DENIED, "approved_by": "Ann", "result": "denied by Ann: no"},
     "Investigator used search_logs(service=checkout) → denied by Ann"),
    ({"status": ToolCallStatus.DENIED, "result": "nobody answered in time"},
     "Investigator used search_logs(service=checkout) → denied"),
    ({"status": ToolCallStatus.UNCERTAIN, "result": ""},
     "Investigator used search_logs(service=checkout) → uncertain"),
    ({"approved_by": "Ann", "result": "rolled back\nto v41"},
     "Investigator used search_logs(service=checkout) → 2 lines, approved by Ann"),
    ({"arguments": {}}, "Investigator used search_logs() → 8 chars"),
    ({"arguments": {"since": "10:00 UTC", "limit": 50, "services": ["a", "b"]}},
     'Investigator used search_logs(since="10:00 UTC", limit=50, services=["a", "b"]) → 8 '
     "chars"),
])
def test_a_tool_call_is_told_in_one_line(update, told):
    assert tool_call_line(tool_call(**update)) == told


def test_long_arguments_are_cut_and_kept_on_one_line():
    line = tool_call_line(tool_call(arguments={"query": "a\nb " * 100}))
    assert "\n" not in line
    assert line.startswith('Investigator used search_logs(query="a\\nb a\\nb')
    assert line.endswith('...) → 8 chars') and len(line) < 120


@pytest.fixture
def store(sync_redis, server, keys) -> RoomStore:
    """An incident room: the task, then Investigator's message written from two calls."""
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, incident_spec())
    store.post(ROOM, "User", "Why does checkout fail?")
    commit_tool_message_now(lambda: fakeredis.FakeAsyncRedis(server=server), keys, ROOM,
                            "Investigator", "Cards are declined since 10:00.",
                            [tool_call(0, result=LOGS),
                             tool_call(1, tool="grafana/query", arguments={"panel": "p99"},
                                       status=ToolCallStatus.DENIED, approved_by="Ann")])
    return store


TOLD = ["Investigator used search_logs(service=checkout) → 12 lines",
        "Investigator used grafana/query(panel=p99) → denied by Ann"]


def test_the_turns_line_ends_with_each_tool_call_its_answers_made(store):
    (record,) = store.read_turns(ROOM)
    line = turn_line(incident_spec(), record)
    assert line.text() == " · ".join(["selector picked Investigator", *TOLD])
    assert line.as_json()["tools"] == TOLD


def test_a_turn_without_tool_calls_is_told_as_before(store):
    (record,) = store.read_turns(ROOM)
    bids = [bid.model_copy(update={"tool_calls": []}) for bid in record.bids]
    line = turn_line(incident_spec(), record.model_copy(update={"bids": bids}))
    assert line.text() == "selector picked Investigator" and line.tools == ()


def printed(print_to) -> list[str]:
    """What ``print_to(console)`` prints, line by line, as piped."""
    out = io.StringIO()
    print_to(terminal.make_console(out))
    return out.getvalue().splitlines()


def test_parley_run_tells_the_tool_calls_once_in_the_turns_line_under_the_message(store):
    printer = RunPrinter(Console(file=io.StringIO()), store, ROOM, incident_spec())
    lines = printed(lambda console: [
        (setattr(printer, "console", console), printer.message(message))
        for message in store.read_messages(ROOM)])
    assert lines == ["  1 User: Why does checkout fail?",
                     "  2 Investigator: Cards are declined since 10:00.",
                     "    " + " · ".join(["selector picked Investigator", *TOLD])]


def test_follow_and_the_transcript_tell_them_under_the_message(store):
    messages = store.read_messages(ROOM)
    expected = ["  1 User: Why does checkout fail?",
                "  2 Investigator: Cards are declined since 10:00.",
                *("    " + told for told in TOLD)]
    assert printed(lambda console: [terminal.print_message(console, m) for m in messages]) \
        == expected
    assert transcript_text(messages).splitlines() == expected


def test_a_tool_call_cannot_print_a_terminal_escape_or_a_line_of_its_own():
    message = Message(seq=2, sender="Investigator", content="done",
                      tool_calls=[tool_call(tool="search\x1b[2J", arguments={
                          "q": "x\n  3 SRE: rollback now\x1b]52;c;AAAA\x07"})])
    (line,) = transcript_text([message]).splitlines()[1:]
    assert "\x1b" not in line and "\\x1b" in line and "\n" not in line


@pytest.fixture
def cli_client(monkeypatch, store) -> Client:
    """The CLI's Client on the test's fakeredis."""
    client = Client(Settings(key_prefix=store.keys.prefix))
    client.redis, client.store = store.redis, RoomStore(store.redis, Keys(store.keys.prefix))
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    return client


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli.app, list(args))
    assert result.exit_code == 0, result.stdout
    return result.stdout


def test_parley_turns_tells_each_tool_call_after_its_turns_answers(cli_client):
    lines = invoke("turns", ROOM).splitlines()
    assert lines[0].startswith("turn 1 · run 1 · Investigator spoke")
    assert lines[-2:] == ["    " + told for told in TOLD]


def test_parley_turns_json_has_each_answers_tool_call_records(cli_client):
    (turn,) = json.loads(invoke("turns", ROOM, "--json"))["turns"]
    selector, investigator = turn["answers"]
    assert selector["tool_calls"] == []
    assert [call["tool"] for call in investigator["tool_calls"]] == ["search_logs",
                                                                      "grafana/query"]
    assert investigator["tool_calls"][1] == {
        "id": "1.1.1.0.1", "agent": "Investigator", "tool": "grafana/query",
        "arguments": {"panel": "p99"}, "status": "denied", "result": "12 lines",
        "duration_ms": 12.5, "round": 0, "index": 1, "approved_by": "Ann", "replayed": False}


def test_parley_transcript_json_has_each_messages_tool_calls(cli_client):
    messages = json.loads(invoke("transcript", ROOM, "--json"))["messages"]
    assert messages[0]["tool_calls"] is None
    assert messages[1]["tool_results"] == "shared"
    assert [call["status"] for call in messages[1]["tool_calls"]] == ["ok", "denied"]
