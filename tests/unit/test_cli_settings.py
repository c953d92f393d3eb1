"""The CLI's settings and start-up: ``--version``, a bad ``PARLEY_*`` value named by its
variable, the ``.env`` file, and ``parley worker``'s options passed through to Celery."""

from __future__ import annotations

import os
from importlib import metadata

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.shared.settings import Settings, get_settings


@pytest.fixture
def fresh_settings():
    """The process's settings are read again in the test and after it."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_version_prints_the_installed_package_version():
    result = CliRunner().invoke(cli.app, ["--version"])

    assert result.exit_code == 0
    assert result.stdout == f"parley {metadata.version('parley')}\n"


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("PARLEY_LEASE_TTL_S", "soon", "parley: invalid setting PARLEY_LEASE_TTL_S: Input should be "
                                   "a valid number, unable to parse string as a number\n"),
    ("PARLEY_COORDINATOR_CAPACITY", "0", "parley: invalid setting PARLEY_COORDINATOR_CAPACITY: "
                                         "Input should be greater than or equal to 1\n"),
    ("PARLEY_LOG_FORMAT", "xml", "parley: invalid setting PARLEY_LOG_FORMAT: String should match "
                                 "pattern '^(auto|json|console)$'\n"),
    ("PARLEY_WORKER_KEY_ENVS", "OPENAI_API_KEY,sk-1", "parley: invalid setting "
     "PARLEY_WORKER_KEY_ENVS: 'sk-1' is not an environment variable name (letters, digits "
     "and '_')\n"),
    ("PARLEY_LEASE_RENEW_S", "4", "parley: invalid settings: PARLEY_LEASE_RENEW_S must be under "
                                  "half of PARLEY_LEASE_TTL_S (0 means a third of it)\n"),
])
def test_a_bad_setting_is_one_line_naming_its_variable(monkeypatch, fresh_settings, variable,
                                                       value, expected):
    monkeypatch.setenv(variable, value)

    result = CliRunner().invoke(cli.app, ["status"])

    assert (result.exit_code, result.stderr) == (2, expected)


def test_a_bad_setting_never_shows_its_value(monkeypatch, fresh_settings):
    monkeypatch.setenv("PARLEY_AGENTS_PER_TASK", "s3cret-value")

    result = CliRunner().invoke(cli.app, ["post", "r1", "hi"])

    assert result.exit_code == 2
    assert "PARLEY_AGENTS_PER_TASK" in result.stderr and "s3cret" not in result.stderr


def test_settings_are_read_from_a_dot_env_file_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("PARLEY_KEY_PREFIX", raising=False)
    monkeypatch.delenv("PARLEY_LEASE_TTL_S", raising=False)
    (tmp_path / ".env").write_text("PARLEY_KEY_PREFIX=from-file\nPARLEY_LEASE_TTL_S=9\n"
                                   "OPENAI_API_KEY=not-a-setting\n")
    monkeypatch.chdir(tmp_path)

    settings = Settings()

    assert (settings.key_prefix, settings.lease_ttl_s) == ("from-file", 9.0)


def test_the_environment_wins_over_the_dot_env_file(monkeypatch, tmp_path):
    (tmp_path / ".env").write_text("PARLEY_KEY_PREFIX=from-file\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PARLEY_KEY_PREFIX", "from-env")

    assert Settings().key_prefix == "from-env"


def test_a_bad_value_in_the_dot_env_file_is_named_too(monkeypatch, tmp_path, fresh_settings):
    monkeypatch.delenv("PARLEY_SCAN_INTERVAL_S", raising=False)
    (tmp_path / ".env").write_text("PARLEY_SCAN_INTERVAL_S=-1\n")
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(cli.app, ["status"])

    assert result.exit_code == 2
    assert result.stderr == ("parley: invalid setting PARLEY_SCAN_INTERVAL_S: Input should be "
                             "greater than 0\n")


@pytest.fixture
def celery_argv(monkeypatch, fresh_settings) -> list[str]:
    """What ``parley worker`` hands to Celery (no worker is started)."""
    from parley.workers.app import app as celery_app

    argv: list[str] = []
    monkeypatch.setattr(celery_app, "worker_main", argv.extend)
    return argv


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_worker_passes_its_node_name_concurrency_queues_and_events_to_celery(celery_argv):
    result = CliRunner().invoke(cli.app, ["worker", "-n", "w2@%h", "-c", "3", "-Q",
                                          "parley.local,parley.agents", "-E"])

    assert result.exit_code == 0, result.output
    assert option(celery_argv, "--hostname") == "w2@%h"
    assert option(celery_argv, "--concurrency") == "3"
    assert option(celery_argv, "--queues") == "parley.local,parley.agents"
    assert "--task-events" in celery_argv
    assert "--without-heartbeat" not in celery_argv  # Flower tells live workers by them


def test_worker_defaults_to_a_node_name_of_its_own_and_heartbeats_without_task_events(
        celery_argv):
    result = CliRunner().invoke(cli.app, ["worker"])

    assert result.exit_code == 0, result.output
    # Two workers of one host must not share Celery's default celery@<host>.
    assert option(celery_argv, "--hostname") == f"parley@%h-{os.getpid()}"
    assert "--health-port" not in celery_argv
    # Task events cost three publishes a task: off unless asked for (-E, or Flower's
    # remote control, which needs the heartbeats).
    assert "--task-events" not in celery_argv and "--without-heartbeat" not in celery_argv
    assert {"--without-gossip", "--without-mingle"} <= set(celery_argv)
    assert option(celery_argv, "--concurrency") == str(Settings().worker_concurrency)


def test_worker_passes_options_it_does_not_know_to_celery(celery_argv):
    result = CliRunner().invoke(cli.app, ["worker", "-c", "3", "--autoscale", "64,8",
                                          "--max-memory-per-child=500000", "--concurrency", "5"])

    assert result.exit_code == 0, result.output
    assert celery_argv[-3:] == ["--autoscale", "64,8", "--max-memory-per-child=500000"]
    assert option(celery_argv, "--concurrency") == "5"  # still parley's own option


def test_an_option_celery_does_not_know_either_is_one_line_and_exit_2(fresh_settings):
    result = CliRunner().invoke(cli.app, ["worker", "--no-such-celery-option"])

    assert result.exit_code == 2
    # (In JSON log mode a worker_starting line comes first.)
    assert result.stderr.splitlines()[-1] == (
        "parley: celery worker: No such option '--no-such-celery-option'.")


def test_a_worker_without_task_events_sends_no_heartbeats_either(celery_argv):
    result = CliRunner().invoke(cli.app, ["worker", "--no-task-events", "--health-port", "9"])

    assert result.exit_code == 0, result.output
    assert "--task-events" not in celery_argv and "--without-heartbeat" in celery_argv
    assert option(celery_argv, "--health-port") == "9"
