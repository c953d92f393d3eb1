"""An agent's model configuration is validated on load, with errors that say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from parley.client import load_spec
from parley.shared.models import AgentSpec, RoomSpec

EXAMPLES = sorted(Path(__file__).parents[2].joinpath("examples", "rooms").glob("*.yaml"))


def agent(**fields) -> AgentSpec:
    return AgentSpec.model_validate({"name": "A", "model": "openai/gpt-4o-mini", **fields})


def rejection(**fields) -> str:
    with pytest.raises(ValidationError) as caught:
        agent(**fields)
    return str(caught.value)


def test_a_fully_configured_agent_is_accepted():
    spec = agent(temperature=0.3, max_tokens=400, api_base="http://127.0.0.1:11434/v1",
                 api_key_env="LOCAL_KEY", timeout_s=20, max_context_tokens=8192,
                 litellm_kwargs={"top_p": 0.9, "extra_headers": {"X-Team": "research"}},
                 queue="parley.local")
    assert (spec.queue, spec.api_key_env, spec.timeout_s) == ("parley.local", "LOCAL_KEY", 20)


@pytest.mark.parametrize("fields, says", [
    ({"model": "gpt 4o"}, "litellm model string"),
    ({"model": ""}, "litellm model string"),
    ({"temperature": 3}, "less than or equal to 2"),
    ({"max_tokens": 0}, "greater than or equal to 1"),
    ({"api_base": "localhost:8000"}, "http:// or https:// URL"),
    ({"api_key_env": "sk-abc123"}, "must name an environment variable"),
    ({"timeout_s": 0}, "greater than 0"),
    ({"max_context_tokens": 100}, "greater than or equal to 256"),
    ({"max_tokens": 9000, "max_context_tokens": 8192}, "must be smaller than max_context_tokens"),
    ({"queue": "local models"}, "Celery queue name"),
    ({"litellm_kwargs": {"api_key": "sk-abc"}}, "never put credentials in a spec"),
    ({"litellm_kwargs": {"extra_headers": {"Authorization": "Bearer x"}}},
     "never put credentials in a spec"),
    ({"litellm_kwargs": {"aws_secret_access_key": "x"}}, "never put credentials in a spec"),
    ({"litellm_kwargs": {"temperature": 0.1}}, "set the agent's temperature field instead"),
    ({"litellm_kwargs": {"base_url": "http://x"}}, "set the agent's api_base field instead"),
    ({"litellm_kwargs": {"tool_choice": "auto"}}, "set by parley for the respond protocol"),
    ({"litellm_kwargs": {"num_retries": 3}}, "set by parley for the respond protocol"),
    ({"unknown_field": 1}, "Extra inputs are not permitted"),
])
def test_a_bad_setting_is_refused_with_a_clear_error(fields, says):
    assert says in rejection(**fields)


def test_pricing_and_cache_keys_are_not_mistaken_for_credentials():
    spec = agent(litellm_kwargs={"input_cost_per_token": 1e-7, "prompt_cache_key": "room"})
    assert spec.litellm_kwargs["prompt_cache_key"] == "room"


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_room_is_a_valid_spec(path):
    assert len(load_spec(path).agents) >= 2


def test_a_policy_that_names_no_kind_is_the_bid_policy():
    spec = RoomSpec.model_validate({
        "policy": {"bid_timeout_s": 2},
        "agents": [{"name": name, "model": "scripted", "script": []} for name in ("A", "B")],
    })
    assert (spec.policy.kind, spec.policy.call_timeout) == ("bid", 2.0)


@pytest.mark.parametrize("field, value", [
    ("name", "Optimist\n"), ("model", "openai/gpt-4o-mini\n"), ("api_base", "http://127.0.0.1:8000/v1\n"),
    ("api_key_env", "OPENAI_API_KEY\n"), ("queue", "parley.local\n"),
])
def test_a_value_with_a_trailing_newline_is_refused(field, value):
    agent(**{field: value.rstrip("\n")})
    with pytest.raises(ValidationError, match=field):
        agent(**{field: value})


# --- litellm_kwargs: an allow-list, and no credential at any depth -------------------------

@pytest.mark.parametrize("kwargs", [
    {"extra_headers": [["Authorization", "Bearer sk-live"]]},
    {"extra_headers": {"X-Api-Token": "abc"}},
    {"extra_headers": {"X-Auth-Token": "abc"}},
    {"extra_headers": {"Ocp-Apim-Subscription-Key": "abc"}},
    {"extra_headers": {"Cookie": "sid=abc"}},
    {"extra_headers": {"X-Forward": "Basic dXNlcjpwYXNz"}},
    {"extra_body": {"options": [{"auth": {"user": "u"}}]}},
    {"extra_body": {"upstream": "https://user:pass@llm.example.com/v1"}},
    {"extra_body": {"notes": ["fine", {"deep": ["sk-proj-abcdefghijklmnopqrstuvwx"]}]}},
    {"stop": ["Bearer abc.def"]},
    {"api_token": "abc"},
    {"hf_token": "abc"},
    {"github_token": "abc"},
    {"aws_secret_access_key": "abc"},
    {"vertex_credentials": "{}"},
], ids=["list-headers", "api-token", "auth-token", "subscription-key", "cookie", "basic-value",
        "nested-auth", "userinfo-url", "sk-value", "bearer-in-stop", "api_token", "hf_token",
        "github_token", "aws", "vertex"])
def test_a_credential_anywhere_in_litellm_kwargs_is_refused(kwargs):
    assert "never put credentials in a spec" in rejection(litellm_kwargs=kwargs)


def test_a_refused_credential_is_never_echoed_in_the_error():
    message = rejection(litellm_kwargs={"extra_headers": {"Authorization": "Bearer sk-secret-123"}})
    assert "never put credentials" in message and "sk-secret-123" not in message


@pytest.mark.parametrize("name", ["extra_query", "aws_region_name", "custom_llm_provider",
                                  "metadata", "api_type", "proxy"])
def test_an_argument_outside_the_allow_list_is_refused_naming_the_allowed_ones(name):
    message = rejection(litellm_kwargs={name: {"key": "v"} if name == "extra_query" else "x"})
    assert f"{name!r} is not a litellm argument a spec may set; allowed: " in message
    assert "top_p" in message and "extra_headers" in message


@pytest.mark.parametrize("kwargs, says", [
    ({"extra_headers": [["X-Team", "research"]]}, "'extra_headers' must be a mapping of header names"),
    ({"extra_headers": {"X-Retries": 3}}, "'extra_headers' must be a mapping of header names"),
    ({"extra_body": ["x"]}, "'extra_body' must be a mapping"),
    ({"input_cost_per_token": "1e-6"}, "must be a number of US dollars"),
    ({"output_cost_per_token": -1}, "must be a number of US dollars"),
])
def test_request_extras_and_prices_must_have_their_shape(kwargs, says):
    assert says in rejection(litellm_kwargs=kwargs)


@pytest.mark.parametrize("url, says", [
    ("http://user:secret@127.0.0.1:8000/v1", "'user:password@' in the URL"),
    ("https://token@llm.example.com/v1", "'user:password@' in the URL"),
    ("https://llm.example.com/v1?api-key=abc", "'?api-key=' in the URL"),
])
def test_an_api_base_carrying_credentials_is_refused(url, says):
    message = rejection(api_base=url)
    assert says in message and "never put credentials in a spec" in message


def test_every_allowed_sampling_and_output_knob_is_accepted():
    kwargs = {"top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.1,
              "frequency_penalty": 0.2, "repetition_penalty": 1.1, "seed": 7,
              "logit_bias": {"50256": -100}, "stop": ["\nUser:"], "max_completion_tokens": 300,
              "logprobs": False, "top_logprobs": 0, "parallel_tool_calls": False,
              "reasoning_effort": "low", "thinking": {"type": "enabled", "budget_tokens": 1024},
              "verbosity": "low", "api_version": "2024-06-01", "service_tier": "auto",
              "prompt_cache_key": "room-1", "user": "team-research", "drop_params": True,
              "input_cost_per_token": 1e-7, "output_cost_per_token": 0,
              "extra_headers": {"X-Team": "research", "anthropic-beta": "tools-2024-05-16"},
              "extra_body": {"options": {"num_ctx": 8192, "max_tokens": 10}},
              "mock_response": "hi", "mock_timeout": False}
    assert agent(litellm_kwargs=kwargs).litellm_kwargs == kwargs
