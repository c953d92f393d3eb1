"""The CLI's settings: a bad ``PARLEY_*`` value named by its variable, the ``.env`` file."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from parley import cli
from shared.settings import Settings, get_settings


@pytest.fixture
def fresh_settings():
    """The process's settings are read again in the test and after it."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


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
