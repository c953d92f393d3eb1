"""A spec cannot make a worker send its keys anywhere the operator did not allow: checked
on every request that reached the local OpenAI-compatible stub (any path, every header and
the raw body), through litellm's real HTTP client."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from parley.coordinator.policies.common import likely_fix
from parley.shared.models import AgentSpec, Answer, AnswerStatus, ErrorKind, Message
from parley.shared.settings import DEFAULT_WORKER_KEY_ENVS, get_settings
from parley.workers.calls import Call, answer_call
from parley.workers.credentials import NO_KEY
from parley.workers.llm import KEYLESS_PROVIDERS
from tests.support.openai_stub import OpenAIStub, error, tool_call

pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

SECRET = "sk-worker-secret-7f3a9c1e"
TASK = [Message(seq=1, sender="User", content="Should we launch the beta?")]
# Every variable litellm reads a key from for the providers that may go without one, and the
# worker secrets a spec might name: each holds its own sentinel.
PROVIDER_KEY_ENVS = (*DEFAULT_WORKER_KEY_ENVS, "HOSTED_VLLM_API_KEY", "LITELLM_PROXY_API_KEY",
                     "LLAMAFILE_API_KEY", "LM_STUDIO_API_KEY", "OLLAMA_API_KEY",
                     "OPENAI_LIKE_API_KEY", "XINFERENCE_API_KEY", "AZURE_AD_TOKEN")


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """A stub that answers with or without a key, as a local model server does."""
    with OpenAIStub() as server:
        yield server


def agent_on(stub: OpenAIStub, model: str = "openai/m", litellm_kwargs: dict | None = None,
             **fields) -> AgentSpec:
    # litellm_kwargs go in unchecked, as a spec written straight into Redis past the spec's
    # allow-list would: the worker checks them again.
    spec = AgentSpec(name="Skeptic", model=model, api_base=stub.url, **fields)
    return spec.model_copy(update={"litellm_kwargs": litellm_kwargs or {}})


def bid(agent: AgentSpec) -> Answer:
    return answer_call(agent, [agent], Call(1, 0), lambda: TASK, time.time() + 20,
                    settings=get_settings())


def authorizations(stub: OpenAIStub) -> list[str]:
    return [{name.lower(): value for name, value in seen.headers}.get("authorization", "")
            for seen in stub.seen]


def test_a_key_named_by_the_spec_never_reaches_a_base_that_is_not_allowed(stub, worker_env):
    worker_env(OPENAI_API_KEY=SECRET, PARLEY_WORKER_ALLOWED_API_BASES=None)
    stub.script("m", tool_call(0.7, "Local models need no key."))

    result = bid(agent_on(stub, api_key_env="OPENAI_API_KEY"))

    assert (result.status, result.message) == (AnswerStatus.OK, "Local models need no key.")
    assert len(stub.seen) == 1
    assert stub.requests_carrying(SECRET) == []
    assert authorizations(stub) == [f"Bearer {NO_KEY}"]


def test_the_providers_default_variable_never_reaches_a_base_that_is_not_allowed(
        stub, worker_env):
    worker_env(OPENAI_API_KEY=SECRET, PARLEY_WORKER_ALLOWED_API_BASES=None)

    result = bid(agent_on(stub))

    assert result.status is AnswerStatus.OK
    assert len(stub.seen) == 1
    assert stub.requests_carrying(SECRET) == []


@pytest.mark.parametrize("key_env", ["OPENAI_API_KEY", None])
def test_an_allowed_base_receives_the_key(stub, worker_env, key_env):
    worker_env(OPENAI_API_KEY=SECRET, PARLEY_WORKER_ALLOWED_API_BASES=f"{stub.url}/")

    result = bid(agent_on(stub, api_key_env=key_env))

    assert result.status is AnswerStatus.OK
    assert authorizations(stub) == [f"Bearer {SECRET}"]


@pytest.mark.parametrize("variable", ["PARLEY_REDIS_URL", "INTERNAL_TOKEN"])
def test_a_variable_outside_the_key_list_is_refused_naming_the_setting(
        stub, worker_env, variable):
    worker_env(**{variable: SECRET, "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})

    with capture_logs() as logs:
        result = bid(agent_on(stub, api_key_env=variable))

    assert result.status is AnswerStatus.ERROR
    assert result.error.startswith(f"KeyEnvNotAllowed: api_key_env {variable} ")
    assert "PARLEY_WORKER_KEY_ENVS" in result.error
    assert result.error_kind is ErrorKind.KEY_NOT_ALLOWED
    assert "PARLEY_WORKER_KEY_ENVS" in likely_fix(result.error_kind, result.error_variable)
    assert stub.seen == []
    assert SECRET not in repr(logs)


def test_a_base_that_wants_a_key_it_may_not_receive_fails_naming_the_setting(worker_env):
    worker_env(OPENAI_API_KEY=SECRET, PARLEY_WORKER_ALLOWED_API_BASES=None)
    with OpenAIStub(api_key=SECRET) as stub:
        url = stub.url
        result = bid(agent_on(stub, api_key_env="OPENAI_API_KEY"))

    assert result.status is AnswerStatus.ERROR
    assert result.error == (
        f"ApiBaseNotAllowed: {url} refused the call without a key (401); "
        "this worker sends keys only to the API bases in PARLEY_WORKER_ALLOWED_API_BASES")
    assert result.error_kind is ErrorKind.API_BASE_NOT_ALLOWED
    assert "PARLEY_WORKER_ALLOWED_API_BASES" in likely_fix(result.error_kind, result.error_variable)
    assert stub.requests_carrying(SECRET) == []


def test_a_key_echoed_back_by_a_provider_is_redacted_from_the_error_and_the_logs(worker_env):
    worker_env(OPENAI_API_KEY=SECRET)
    echo = error(401, "Incorrect API key provided: {authorization}", "invalid_request_error")
    with OpenAIStub(api_key="sk-another-key", refusal=echo) as stub:
        worker_env(PARLEY_WORKER_ALLOWED_API_BASES=stub.url)
        with capture_logs() as logs:
            result = bid(agent_on(stub, api_key_env="OPENAI_API_KEY"))

    assert stub.requests_carrying(SECRET)  # the allowed base got it, and said so
    assert result.error.startswith("AuthenticationError: ") and "[redacted]" in result.error
    assert SECRET not in result.error and SECRET not in repr(logs)


@pytest.mark.parametrize("provider", sorted(KEYLESS_PROVIDERS))
def test_a_keyless_provider_at_a_base_that_is_not_allowed_reads_no_variable(
        stub, worker_env, provider):
    sentinels = {name: f"sentinel-{name.lower()}-0123" for name in PROVIDER_KEY_ENVS}
    worker_env(**sentinels, PARLEY_WORKER_ALLOWED_API_BASES=None)

    bid(agent_on(stub, model=f"{provider}/m", api_key_env="OPENAI_API_KEY"))
    bid(agent_on(stub, model=f"{provider}/m"))

    assert len(stub.seen) == 2  # the calls were made (some to a path the stub does not serve)
    leaked = [name for name, value in sentinels.items() if stub.requests_carrying(value)]
    assert leaked == []


@pytest.mark.parametrize("model", ["bedrock/anthropic.claude-3-haiku-20240307-v1:0",
                                   "vertex_ai/gemini-1.5-flash", "azure/my-deployment",
                                   "anthropic/claude-3-5-haiku-20241022"])
def test_a_provider_that_may_read_its_own_credentials_is_not_called_at_a_base_not_allowed(
        stub, worker_env, model):
    worker_env(OPENAI_API_KEY=SECRET, PARLEY_WORKER_ALLOWED_API_BASES=None)

    result = bid(agent_on(stub, model=model))

    assert result.status is AnswerStatus.ERROR
    assert result.error.startswith("ApiBaseNotAllowed: ")
    assert result.error_kind is ErrorKind.API_BASE_NOT_ALLOWED
    assert "PARLEY_WORKER_ALLOWED_API_BASES" in result.error
    assert stub.seen == []


def test_a_provider_chosen_through_litellm_kwargs_is_checked_too(stub, worker_env):
    worker_env(OPENAI_API_KEY=SECRET, PARLEY_WORKER_ALLOWED_API_BASES=None)

    result = bid(agent_on(stub, model="openai/m", litellm_kwargs={"custom_llm_provider": "bedrock"}))

    assert result.error.startswith("ApiBaseNotAllowed: ") and "provider bedrock" in result.error
    assert stub.seen == []


def test_an_endpoint_in_litellm_kwargs_cannot_take_the_workers_cloud_credentials(
        stub, worker_env):
    # Without an api_base, bedrock would sign with these and send to the endpoint given.
    worker_env(AWS_ACCESS_KEY_ID="AKIAWORKERSECRET0001", AWS_SECRET_ACCESS_KEY=SECRET,
               AWS_REGION_NAME="us-east-1", PARLEY_WORKER_ALLOWED_API_BASES=None)
    # The spec refuses this argument; one written straight into Redis still meets the worker.
    agent = AgentSpec(name="Skeptic", model="bedrock/converse/anthropic.claude-3-5-haiku-20241022-v1:0"
                      ).model_copy(update={"litellm_kwargs": {"aws_bedrock_runtime_endpoint": stub.url}})

    result = bid(agent)

    assert result.error == (
        "ApiBaseNotAllowed: litellm_kwargs.aws_bedrock_runtime_endpoint points the call at an "
        "endpoint outside PARLEY_WORKER_ALLOWED_API_BASES, where it may not take the worker's "
        "credentials")
    assert stub.seen == []
