"""The CLI's answers to bad input: one clear line naming what is wrong, exit code 2."""

from __future__ import annotations

import ssl

import pytest
import redis
from typer.testing import CliRunner

from parley.cli import app
from parley.cli.errors import unreachable_redis
from parley.client.client import FOLLOW_BLOCK_MS, Client
from parley.processes import free_port
from parley.shared.keys import Keys
from parley.shared.records import RoomState
from parley.shared.settings import Settings, get_settings
from parley.shared.store import RoomStore
from tests.support.commands import run_spec_in_process
from tests.support.rooms import scripted_spec

GOOD = {
    "name": "panel",
    "policy": {"kind": "bid"},
    "agents": [
        {"name": "A", "model": "scripted", "script": [{"score": 0.9, "message": "hi"}]},
        {"name": "B", "model": "scripted", "script": []},
    ],
}


def with_policy(**policy: object) -> dict:
    return {**GOOD, "policy": {"kind": "bid", **policy}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({**GOOD, "agents": GOOD["agents"][:1]}, "agents: a room needs at least 2 agents"),
        ({**GOOD, "agents": [GOOD["agents"][0]] * 2}, "agent names must be unique, repeated: A"),
        (with_policy(threshold=1.5), "policy.threshold: Input should be less than or equal to 1"),
        (with_policy(threshold=-0.1), "policy.threshold: Input should be greater than or equal to 0"),
        (with_policy(recency_penalty=-1), "policy.recency_penalty: Input should be greater than"),
        (with_policy(max_messages=0), "policy.max_messages: Input should be greater than or equal to 1"),
        ({**GOOD, "policy": {"kind": "vote"}},
         "policy: kind must be one of: bid, selector"),
        ({**GOOD, "colour": "red"}, "colour: Extra inputs are not permitted"),
        ({**GOOD, "agents": [{**GOOD["agents"][0], "temp": 1}, GOOD["agents"][1]]},
         "agents.0.temp: Extra inputs are not permitted"),
        ({**GOOD, "agents": [{"name": "A", "model": "scripted"}, GOOD["agents"][1]]},
         "agents.0: a scripted agent needs a script"),
        ({**GOOD, "agents": [{"name": "A", "model": "scripted", "script": [{"score": 1, "error": "x"}]},
                             GOOD["agents"][1]]},
         "agents.0.script.0: a script entry is exactly one of"),
    ],
)
def test_an_invalid_spec_is_one_line_naming_the_field(tmp_path, spec, expected):
    code, output = run_spec_in_process(tmp_path, spec)
    assert code == 2
    assert expected in output
    assert "Traceback" not in output
    assert output.startswith("parley: invalid room spec")


def test_a_spec_that_is_not_yaml_is_named(tmp_path):
    code, output = run_spec_in_process(tmp_path, None, raw="agents: [unclosed")
    assert code == 2 and "is not valid YAML" in output


def test_a_missing_spec_file_is_named(tmp_path):
    result = CliRunner().invoke(app, ["run", str(tmp_path / "nope.yaml"), "--task", "t"])
    assert result.exit_code == 2 and "no such spec file" in result.output


def test_unreachable_redis_is_one_line_with_the_url(tmp_path, monkeypatch):
    url = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("PARLEY_REDIS_URL", url)
    get_settings.cache_clear()
    try:
        code, output = run_spec_in_process(tmp_path, GOOD)
    finally:
        get_settings.cache_clear()
    assert code == 2
    assert output.count("\n") == 1 or len(output.strip().splitlines()) <= 2
    assert f"cannot reach Redis at {url}" in output and "PARLEY_REDIS_URL" in output


def cli_with_env(monkeypatch, args: list[str], **env: str) -> tuple[int, str]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, args)
    finally:
        get_settings.cache_clear()
    return result.exit_code, result.output


def test_the_redis_password_never_appears_in_an_error_line(tmp_path, monkeypatch):
    port = free_port()
    code, output = cli_with_env(monkeypatch, ["status"],
                                PARLEY_REDIS_URL=f"redis://parley:s3cr%40t@127.0.0.1:{port}/0")
    assert code == 2
    assert "s3cr" not in output
    assert f"cannot reach Redis at redis://parley:***@127.0.0.1:{port}/0" in output


def test_the_no_coordinator_hint_masks_the_redis_password(fake_redis):
    client = Client(Settings(redis_url="redis://:s3cret@10.0.0.5:6379/0", key_prefix="t"))
    client.store = RoomStore(fake_redis, Keys("t"))
    hint = client._not_started_hint("r1", 15, RoomState({}))
    assert "s3cret" not in hint
    assert "0 live coordinator(s) on redis://:***@10.0.0.5:6379/0" in hint


@pytest.fixture
def fake_client(monkeypatch, fake_redis) -> Client:
    """The CLI's Client, on fakeredis, with a room r1 of agents Optimist and Skeptic."""
    client = Client(Settings(key_prefix="t"))
    client.redis = fake_redis
    client.store = RoomStore(fake_redis, Keys("t"))
    client.store.create_room("r1", scripted_spec({"Optimist": [], "Skeptic": []}))
    monkeypatch.setattr("parley.cli.common.Client", lambda: client)
    return client


@pytest.mark.parametrize("sender", ["Optimist", "optimist"])
def test_posting_as_an_agent_is_one_line_naming_the_agent(fake_client, sender):
    result = CliRunner().invoke(app, ["post", "r1", "I agree", "--as", sender])
    assert result.exit_code == 2
    assert result.output == (f"parley: {sender!r} is an agent in room r1: "
                             "people post under their own names\n")
    assert fake_client.redis.xlen(fake_client.store.keys.inbox("r1")) == 0


def test_posting_as_parley_or_with_a_newline_in_the_name_is_refused(fake_client):
    for sender, says in [("parley", "reserved for parley's own notices"),
                         ("Ann\n", "must be 1-64 letters")]:
        result = CliRunner().invoke(app, ["post", "r1", "hello", "--as", sender])
        assert result.exit_code == 2 and says in result.output
        assert len(result.output.splitlines()) == 1
    assert fake_client.redis.xlen(fake_client.store.keys.inbox("r1")) == 0


def test_posting_under_the_default_name_or_ones_own_is_accepted(fake_client):
    for args in (["post", "r1", "hello"], ["post", "r1", "hi", "--as", "Ann"]):
        assert CliRunner().invoke(app, args).exit_code == 0
    inbox = fake_client.redis.xrange(fake_client.store.keys.inbox("r1"))
    assert [fields[b"sender"] for _, fields in inbox] == [b"User", b"Ann"]


def timeout_error(message: str, context: BaseException | None = None) -> redis.TimeoutError:
    error = redis.TimeoutError(message)
    error.__context__ = context
    return error


def tls_connection_error() -> redis.ConnectionError:
    """What redis-py raises when the TLS handshake fails (the SSLError as its context)."""
    error = redis.ConnectionError("Error 1 connecting to 127.0.0.1:6379. [SSL: WRONG_VERSION_NUMBER]")
    error.__context__ = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    return error


def test_a_hung_redis_is_named_as_one_that_did_not_answer():
    line = unreachable_redis("redis://:pw@10.0.0.5:6379/0",
                             timeout_error("Timeout reading from socket"))
    assert line.startswith("cannot reach Redis at redis://:***@10.0.0.5:6379/0 "
                           "(Timeout reading from socket); it did not answer in time")
    assert "TLS" not in line


@pytest.mark.parametrize("error", [timeout_error("Timeout connecting to server"),
                                   tls_connection_error(), ssl.SSLError(1, "EOF")])
def test_a_tls_url_that_fails_names_tls(error):
    line = unreachable_redis("rediss://:pw@10.0.0.5:6379/0", error)
    assert line.startswith("cannot reach Redis at rediss://:***@10.0.0.5:6379/0 (")
    assert "the URL asks for TLS (rediss://): is the server speaking TLS" in line
    assert "\n" not in line


def test_an_unverified_certificate_names_the_ca_setting():
    error = redis.ConnectionError("Error 1 connecting to h:6380. certificate verify failed")
    error.__context__ = ssl.SSLCertVerificationError(1, "certificate verify failed")
    line = unreachable_redis("rediss://h:6380/0", error)
    assert "certificate was not accepted" in line and "PARLEY_REDIS_TLS_CA_FILE" in line


def test_a_closed_port_behind_a_tls_url_is_not_blamed_on_tls():
    line = unreachable_redis("rediss://h:6380/0", redis.ConnectionError("Connection refused."))
    assert "TLS" not in line and "start Redis or point PARLEY_REDIS_URL at one" in line


def test_the_clients_redis_times_out_but_outlasts_a_follow():
    client = Client(Settings(redis_url="redis://127.0.0.1:6379/0"))
    connection = client.redis.connection_pool.connection_kwargs
    assert 0 < connection["socket_connect_timeout"] <= 10
    assert 0 < connection["socket_timeout"] <= 30
    assert connection["socket_timeout"] * 1000 > FOLLOW_BLOCK_MS


def test_a_url_may_set_its_own_client_timeouts():
    client = Client(Settings(redis_url="redis://127.0.0.1:6379/0?socket_timeout=30"))
    assert client.redis.connection_pool.connection_kwargs["socket_timeout"] == 30


def test_an_invalid_setting_is_one_line_naming_it(monkeypatch):
    code, output = cli_with_env(monkeypatch, ["status"], PARLEY_LEASE_TTL_S="soon")
    assert code == 2
    assert output.startswith("parley: invalid setting PARLEY_LEASE_TTL_S: Input should be a "
                             "valid number")
    assert len(output.splitlines()) == 1


def test_a_coordinator_with_a_tls_file_it_cannot_read_says_so_in_one_line(monkeypatch, tmp_path):
    missing = tmp_path / "ca.pem"
    code, output = cli_with_env(monkeypatch, ["coordinator"],
                                PARLEY_REDIS_URL="rediss://127.0.0.1:6380/0",
                                PARLEY_REDIS_TLS_CA_FILE=str(missing))
    assert code == 2
    assert output == f"parley: PARLEY_REDIS_TLS_CA_FILE={missing}: no such file\n"


def test_a_bad_setting_stops_the_coordinator_with_one_line(monkeypatch):
    code, output = cli_with_env(monkeypatch, ["coordinator"], PARLEY_LEASE_TTL_S="-1")
    assert code == 2
    assert output.startswith("parley: invalid setting PARLEY_LEASE_TTL_S: ")
    assert output.count("\n") == 1
