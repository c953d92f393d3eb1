"""An agent's model configuration is validated on load, with errors that say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from parley.client import load_spec
from shared.models import AgentSpec, RoomSpec

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
