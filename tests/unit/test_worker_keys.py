"""Which key an agent's call may carry: the workers' allow-lists, read from Settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parley.shared.models import AgentSpec
from parley.shared.settings import DEFAULT_WORKER_KEY_ENVS, Settings
from parley.workers.credentials import (
    NO_KEY,
    ApiBaseNotAllowed,
    Credential,
    KeyEnvNotAllowed,
    MissingApiKey,
    credential_for,
    redact_keys,
)

LOCAL = "http://127.0.0.1:8000/v1"


def agent(litellm_kwargs: dict | None = None, **fields) -> AgentSpec:
    # litellm_kwargs go in unchecked, as a spec written straight into Redis past the spec's
    # allow-list would: the worker checks them again.
    spec = AgentSpec(name="A", model="openai/gpt-4o-mini", **fields)
    return spec.model_copy(update={"litellm_kwargs": litellm_kwargs or {}})


def test_the_lists_are_read_from_the_environment_as_comma_separated_values(monkeypatch):
    monkeypatch.setenv("PARLEY_WORKER_KEY_ENVS", " OPENAI_API_KEY, LOCAL_LLM_KEY,,")
    monkeypatch.setenv("PARLEY_WORKER_ALLOWED_API_BASES", f"{LOCAL}, https://llm.internal")
    settings = Settings()
    assert settings.worker_key_envs == ("OPENAI_API_KEY", "LOCAL_LLM_KEY")
    assert settings.worker_allowed_api_bases == (LOCAL, "https://llm.internal")


def test_by_default_only_provider_key_variables_are_lent_and_no_base_is_allowed(monkeypatch):
    monkeypatch.delenv("PARLEY_WORKER_KEY_ENVS", raising=False)
    monkeypatch.delenv("PARLEY_WORKER_ALLOWED_API_BASES", raising=False)
    settings = Settings()
    assert settings.worker_key_envs == DEFAULT_WORKER_KEY_ENVS
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_API_KEY"} <= set(DEFAULT_WORKER_KEY_ENVS)
    assert all(name.endswith("_API_KEY") for name in DEFAULT_WORKER_KEY_ENVS)
    assert settings.worker_allowed_api_bases == ()


def test_an_empty_variable_lends_no_key_at_all(monkeypatch):
    monkeypatch.setenv("PARLEY_WORKER_KEY_ENVS", "")
    assert Settings().worker_key_envs == ()


@pytest.mark.parametrize(("variable", "value", "problem"), [
    ("PARLEY_WORKER_KEY_ENVS", "OPENAI_API_KEY,sk-live-123", "'sk-live-123' is not an environment"),
    ("PARLEY_WORKER_ALLOWED_API_BASES", "api.example.com", "is not an http:// or https:// URL"),
    ("PARLEY_WORKER_ALLOWED_API_BASES", "https://u:p@api.example.com", "credentials"),
])
def test_a_bad_entry_is_one_error_naming_the_setting(monkeypatch, variable, value, problem):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as raised:
        Settings()
    [error] = raised.value.errors()
    assert error["msg"].startswith(f"Value error, {variable}: ") and problem in error["msg"]


def test_a_variable_outside_the_list_is_refused_wherever_the_call_goes(monkeypatch):
    monkeypatch.setenv("INTERNAL_TOKEN", "secret-token-value")
    settings = Settings(worker_allowed_api_bases=(LOCAL,))
    for fields in ({}, {"api_base": LOCAL}, {"api_base": "http://10.9.9.9/v1"}):
        with pytest.raises(KeyEnvNotAllowed, match="PARLEY_WORKER_KEY_ENVS"):
            credential_for(agent(api_key_env="INTERNAL_TOKEN", **fields), settings)


def test_the_default_endpoint_and_allowed_bases_get_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    settings = Settings(worker_allowed_api_bases=(LOCAL,))
    assert credential_for(agent(api_key_env="OPENAI_API_KEY"), settings) == Credential("sk-real")
    assert credential_for(agent(api_key_env="OPENAI_API_KEY", api_base=f"{LOCAL}/"),
                          settings) == Credential("sk-real")
    # No api_key_env: litellm reads the provider's own variable, for its own endpoint.
    assert credential_for(agent(), settings) == Credential(None)


def test_any_other_base_gets_a_placeholder_and_the_variable_is_not_even_read(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings(worker_allowed_api_bases=(LOCAL,))
    for fields in ({"api_key_env": "OPENAI_API_KEY"}, {}):
        credential = credential_for(agent(api_base="http://127.0.0.1:8001/v1", **fields), settings)
        assert credential == Credential(NO_KEY, withheld=True)


def test_an_unset_lent_variable_is_still_a_missing_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingApiKey, match="environment variable OPENAI_API_KEY is not set"):
        credential_for(agent(api_key_env="OPENAI_API_KEY"), Settings())


def test_lent_and_provider_key_values_are_redacted_from_text(monkeypatch):
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-abcdefgh12345")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-default-77")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "short")
    monkeypatch.setenv("NOT_A_KEY", "sk-not-lent-999")
    settings = Settings(worker_key_envs=("LOCAL_LLM_KEY", "ANTHROPIC_API_KEY"))
    text = "Incorrect API key: sk-abcdefgh12345 sk-openai-default-77 (short) sk-not-lent-999"
    assert redact_keys(text, settings) == (
        "Incorrect API key: [redacted] [redacted] (short) sk-not-lent-999")


def test_an_endpoint_argument_must_lie_under_an_allowed_base():
    settings = Settings(worker_allowed_api_bases=(LOCAL,))
    allowed = agent(litellm_kwargs={"aws_bedrock_runtime_endpoint": f"{LOCAL}/bedrock"})
    assert credential_for(allowed, settings) == Credential(None)
    for name in ("aws_bedrock_runtime_endpoint", "aws_sts_endpoint", "proxy_url", "API_HOST"):
        with pytest.raises(ApiBaseNotAllowed, match=f"^litellm_kwargs.{name} points the call"):
            credential_for(agent(litellm_kwargs={name: "https://evil.example"}), settings)
    with pytest.raises(ApiBaseNotAllowed):
        credential_for(agent(litellm_kwargs={"proxy_url": {"url": LOCAL}}), settings)
    assert credential_for(agent(litellm_kwargs={"top_p": 0.9, "base_model": "gpt-4o"}),
                          settings) == Credential(None)
