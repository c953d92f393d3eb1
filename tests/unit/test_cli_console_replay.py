"""``parley console`` and ``parley replay`` on fakeredis: their refusals as one line and
exit 2, and where the console's logs go while its screen is up."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.console.app import DiscussionConsole
from tests.support.fake_client import cli_on_fake_client
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"


@pytest.fixture
def client(monkeypatch) -> Client:
    client = cli_on_fake_client(monkeypatch)
    client.store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2)))
    return client


def invoke(*args: str):
    return CliRunner().invoke(cli.app, list(args))


@pytest.fixture
def screen(monkeypatch) -> list[str]:
    """The console's screen replaced by one that logs a warning and an info line."""
    shown: list[str] = []

    def run(app: DiscussionConsole) -> None:
        shown.append(app.me)
        logging.getLogger("parley.console").warning("a warning while the screen is up")
        logging.getLogger("parley.console").info("an info line")

    monkeypatch.setattr(DiscussionConsole, "run", run)
    # Another test in this process may have set these loggers' own level or disabled them
    # (a logging setup): the console's handling of the root logger is what is tested here.
    for name in ("parley", "parley.console"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logging.NOTSET)
        monkeypatch.setattr(logger, "disabled", False)
    monkeypatch.setattr(logging.root.manager, "disable", logging.NOTSET)
    logging.root.manager._clear_cache()
    return shown


@pytest.mark.parametrize(("args", "wording"), [
    (("console", "nope"), "parley: no room 'nope'"),
    (("console", ROOM, "--log-file", "/nonexistent/dir/console.log"),
     "parley: cannot write log file /nonexistent/dir/console.log"),
    (("replay", ROOM, "--set", "threshold"), "parley: --set 'threshold' is not name=value"),
    (("replay", ROOM, "--set", "threshold=0.7"), f"parley: room {ROOM} has no recorded turns yet"),
    (("replay", ROOM, "--set", "bid_timeout_s=5"), "parley: bid_timeout_s cannot be replayed"),
])
def test_each_refusal_is_one_line_and_exit_2(client, screen, args, wording):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.output.startswith(wording) and result.output.count("\n") == 1
    assert screen == []


def test_without_a_log_file_warnings_are_held_and_printed_once_the_screen_closes(client, screen):
    result = invoke("console", ROOM, "--as", "Ada")
    assert (result.exit_code, screen) == (0, ["Ada"])
    assert "a warning while the screen is up" in result.output
    assert "an info line" not in result.output


def test_with_a_log_file_every_line_goes_there(client, screen, tmp_path):
    path = tmp_path / "console.log"
    result = invoke("console", ROOM, "--log-file", str(path))
    assert result.exit_code == 0 and "a warning" not in result.output
    assert path.read_text().splitlines() == ["a warning while the screen is up", "an info line"]
