"""A room with a spending limit across real processes: a `parley worker` calling litellm
against the local OpenAI-compatible stub (which reports each call's tokens, priced by the
agents' own per-token prices) and a `parley coordinator`, on the real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parley.client import Client
from parley.shared.models import RoomSpec, StopReason
from tests.support.openai_stub import OpenAIStub, tool_call

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
# Each call: 100 prompt tokens at $0.0001 and 10 completion tokens at $0.001, $0.02.
PRICES = {"input_cost_per_token": 1e-4, "output_cost_per_token": 1e-3}


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(api_key=KEY) as server:
        yield server


def test_a_run_stops_with_budget_once_its_calls_cost_the_limit(stub, processes, settings, queue):
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    stub.script("alpha", *(tool_call(score, text, **usage) for score, text in
                           [(0.9, "Ship it."), (0.2, "-"), (0.9, "Small cohort first."),
                            (0.9, "never asked")]))
    stub.script("beta", *(tool_call(score, text, **usage) for score, text in
                          [(0.2, "-"), (0.9, "What fails first?"), (0.2, "-"),
                           (0.9, "never asked")]))
    spec = RoomSpec.model_validate({
        "name": "budget-room",
        # A turn is two bids, $0.04: after three turns ($0.12) the run is past $0.10.
        "limits": {"max_cost_usd_per_run": 0.10},
        "policy": {"kind": "bid", "bid_timeout_s": 60},
        "agents": [{"name": name, "model": f"openai/{name}", "api_base": stub.url,
                    "api_key_env": KEY_ENV, "queue": queue, "litellm_kwargs": PRICES}
                   for name in ("alpha", "beta")],
    })
    processes.worker("-Q", queue, "-c", "4", env={
        KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
        "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
    processes.coordinator()
    client = Client(settings)

    result = client.run(spec, "Launch next week?", timeout_s=120)

    assert [(m.sender, m.content) for m in result.messages] == [
        ("User", "Launch next week?"), ("alpha", "Ship it."), ("beta", "What fails first?"),
        ("alpha", "Small cohort first.")]
    assert (result.status, result.stop_reason) == ("idle", StopReason.BUDGET)
    assert result.stop_detail == ("limits.max_cost_usd_per_run reached: this run's calls cost "
                                  "$0.12, the limit is $0.1")
    # No fourth turn was asked for: each agent answered three calls.
    assert len(stub.requests_for("alpha")) == len(stub.requests_for("beta")) == 3
    state = client.state(result.room)
    assert (state.run_usage.prompt_tokens, state.run_usage.completion_tokens) == (600, 60)
    assert state.usage.cost_usd == pytest.approx(0.12)
