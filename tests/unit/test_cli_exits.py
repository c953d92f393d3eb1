"""``parley run``'s exit codes: 0 a run that ended idle, 1 one that ended failed (its
output printed first), 2 bad input, 3 a run that did not end in time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from parley import cli
from parley.client import Client, RunResult
from parley.shared.keys import Keys
from parley.shared.models import Message, RoomStatus, StopReason
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.rooms import scripted_spec


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "room.yaml"
    spec = scripted_spec({"Optimist": [], "Skeptic": []})
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    return path


@pytest.fixture
def client(monkeypatch, fake_redis) -> Client:
    """The CLI's Client, on fakeredis: rooms are stored, but no coordinator serves them."""
    client = Client(Settings(key_prefix="t"))
    client.redis = fake_redis
    client.store = RoomStore(fake_redis, Keys("t"))
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    return client


def ended(status: RoomStatus, reason: StopReason, detail: str = "") -> RunResult:
    return RunResult(room="r1", status=status, stop_reason=reason, stop_detail=detail,
                     messages=[Message(seq=1, sender="User", content="go")])


def run(spec_file: Path, *options: str):  # noqa: ANN201
    return CliRunner().invoke(cli.app, ["run", str(spec_file), "--task", "go", *options])


@pytest.mark.parametrize("as_json", [False, True])
def test_a_run_that_ends_failed_exits_1_after_printing_it(client, monkeypatch, spec_file, as_json):
    detail = "no agent answered within 0.5s"
    monkeypatch.setattr(client, "wait", lambda *a, **k: ended(
        RoomStatus.FAILED, StopReason.NO_BIDS, detail))

    result = run(spec_file, *(["--json"] if as_json else []))

    assert result.exit_code == 1, result.output
    if as_json:
        printed = json.loads(result.stdout)
        assert (printed["status"], printed["stop_reason"]) == ("failed", "no_bids")
    else:
        assert f"failed · stopped by no_bids: {detail}" in result.stdout


@pytest.mark.parametrize("reason", [StopReason.LULL, StopReason.MAX_MESSAGES])
def test_a_run_that_ends_idle_exits_0(client, monkeypatch, spec_file, reason):
    monkeypatch.setattr(client, "wait", lambda *a, **k: ended(RoomStatus.IDLE, reason))

    assert run(spec_file, "--json").exit_code == 0


def test_a_run_that_does_not_end_in_time_exits_3_with_one_line(client, spec_file):
    result = run(spec_file, "--timeout", "0.2")

    assert result.exit_code == 3
    assert result.stderr.startswith("parley: room test-room-")
    assert result.stderr.endswith(" did not finish within 0.2s\n")
    assert result.stdout == ""


def test_bad_input_exits_2(client, tmp_path):
    result = run(tmp_path / "missing.yaml")

    assert result.exit_code == 2
    assert result.stderr.startswith("parley: no such spec file")
