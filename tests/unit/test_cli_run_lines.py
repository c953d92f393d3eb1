"""What ``parley run`` and ``parley post --wait`` print, on fakeredis with each post served
to its run's end: the turn's line under each message, the run's end in words with what to
do next; ``--quiet`` as before; ``--json`` with the same facts as fields."""

from __future__ import annotations

import json
from pathlib import Path

import fakeredis
import pytest
import yaml
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.rooms import scripted_spec
from tests.unit.test_cli_mention import serving
from tests.unit.test_selector_room import selector_spec

SCRIPTS = {"A": [{"score": 0.8, "message": "first"}, {"score": 0.7, "message": "again"}],
           "B": [{"score": 0.8, "message": "tied"}, {"error": "provider down"}]}


@pytest.fixture
def client(monkeypatch, server) -> Client:
    """The CLI's Client on fakeredis; each post is served until its room is idle."""
    fake = fakeredis.FakeRedis(server=server)
    client = Client(Settings(key_prefix="t"))
    client.redis, client.store = fake, RoomStore(fake, Keys("t"))
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    serving(client, server, monkeypatch)
    return client


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "room.yaml"
    path.write_text(yaml.safe_dump(scripted_spec(SCRIPTS).model_dump(mode="json")))
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.stdout


def test_run_prints_each_turns_bids_under_its_message_and_the_end_in_words(client, spec_file):
    code, out = invoke("run", str(spec_file), "--task", "go")
    assert code == 0, out
    lines = out.splitlines()
    room = lines[-1].split()[1]
    assert lines == [
        "  1 User: go",
        "  2 A (score 0.80): first",
        "    bids: A 0.80, B 0.80 · tie at 0.80: A is listed before B",
        "    turn 2, nothing posted · bids: A 0.70→0.40 (recency), B failed (scripted) · "
        "the recency penalty took A to 0.40, not above 0.5",
        f"room {room} · idle · stopped by lull: no bid cleared the 0.5 threshold · next: "
        f'post again to start a new run (parley post {room} "..."); see every turn with '
        f"parley turns {room}"]


def test_a_turn_that_posted_nothing_gets_its_line_before_the_end(client, tmp_path):
    path = tmp_path / "room.yaml"
    spec = scripted_spec({"A": [{"score": 0.9, "message": "hi"}, {"score": 0.2, "message": "x"}],
                          "B": [{"score": 0.1, "message": ""}] * 2})
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    code, out = invoke("run", str(path), "--task", "go")
    assert code == 0, out
    assert out.splitlines()[-2] == ("    turn 2, nothing posted · bids: A 0.20→-0.10 "
                                    "(recency), B silent")


def test_quiet_prints_the_transcript_and_the_short_end_only(client, spec_file):
    code, out = invoke("run", str(spec_file), "--task", "go", "--quiet")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:2] == ["  1 User: go", "  2 A (score 0.80): first"]
    assert lines[2].startswith("room ") and lines[2].endswith(" · idle · stopped by lull")
    assert len(lines) == 3


def test_json_carries_the_turns_facts_and_the_stop_in_words(client, spec_file):
    code, out = invoke("run", str(spec_file), "--task", "go", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["stop_reason"] == "lull"  # the code, unchanged
    assert result["stop_text"] == "lull: no bid cleared the 0.5 threshold"
    assert result["next"][1] == f"see every turn with parley turns {result['room']}"
    first, second = result["turns"]
    assert (first["winner"], first["tie_with"]) == ("A", ["B"])
    assert second["answers"][1] == {"agent": "B", "kind": "bid", "outcome": "failed",
                                    "score": None, "adjusted": None, "error_kind": "scripted"}
    assert (second["winner"], second["leader_without_penalty"]) == (None, "A")


def test_post_wait_shows_only_the_new_runs_turns(client, tmp_path):
    path = tmp_path / "room.yaml"
    spec = scripted_spec({"A": [{"score": 0.9, "message": "one"}, {"score": 0.1, "message": ""},
                                {"score": 0.9, "message": "two"}, {"score": 0.1, "message": ""}],
                          "B": [{"score": 0.1, "message": ""}] * 4})
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    room = json.loads(invoke("run", str(path), "--task", "go", "--json")[1])["room"]

    code, out = invoke("post", room, "more", "--wait")
    assert code == 0, out
    bid_lines = [line for line in out.splitlines() if "bids:" in line]
    assert bid_lines == ["    bids: A 0.90, B silent",
                         "    turn 4, nothing posted · bids: A silent, B silent"]


def test_a_selector_run_shows_the_pick_and_no_score(client, tmp_path):
    path = tmp_path / "room.yaml"
    spec = selector_spec(["planner", "TERMINATE"], {"planner": ["day plan"]})
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    code, out = invoke("run", str(path), "--task", "go")
    assert code == 0, out
    assert out.splitlines()[1:3] == ["  2 planner: day plan", "    selector picked planner"]
    assert "stopped by terminate: the selector said TERMINATE" in out
