"""A room with a spending limit across real processes: a `parley worker` calling litellm
against the local OpenAI-compatible stub (which reports each call's tokens, priced by the
agents' own per-token prices) and a `parley coordinator`, on the real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parley.client import Client
from parley.shared.models import AnswerStatus, BidPolicy, RoomLimits, RoomSpec, StopReason
from tests.support.openai_stub import OpenAIStub, tool_call
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
# Each call: 100 prompt tokens at $0.0001 and 10 completion tokens at $0.001, $0.02.
PRICES = {"input_cost_per_token": 1e-4, "output_cost_per_token": 1e-3}


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(api_key=KEY) as server:
        yield server


def priced_room(stub: OpenAIStub, queue: str, limits: dict[str, float], bid_timeout_s: float
                ) -> RoomSpec:
    """A bid room of alpha and beta, priced at PRICES, on the stub."""
    return RoomSpec.model_validate({
        "name": "budget-room", "limits": limits,
        "policy": {"kind": "bid", "bid_timeout_s": bid_timeout_s},
        "agents": [{"name": name, "model": f"openai/{name}", "api_base": stub.url,
                    "api_key_env": KEY_ENV, "queue": queue, "litellm_kwargs": PRICES}
                   for name in ("alpha", "beta")],
    })


def start(processes, settings, stub: OpenAIStub, queue: str) -> Client:
    """A worker lent the stub's key and a coordinator; a client of them."""
    processes.worker("-Q", queue, "-c", "4", env={
        KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
        "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
    processes.coordinator()
    return Client(settings)


def test_a_run_stops_with_budget_once_its_calls_cost_the_limit(stub, processes, settings, queue):
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    stub.script("alpha", *(tool_call(score, text, **usage) for score, text in
                           [(0.9, "Ship it."), (0.2, "-"), (0.9, "Small cohort first."),
                            (0.9, "never asked")]))
    stub.script("beta", *(tool_call(score, text, **usage) for score, text in
                          [(0.2, "-"), (0.9, "What fails first?"), (0.2, "-"),
                           (0.9, "never asked")]))
    # A turn is two bids, $0.04: after three turns ($0.12) the run is past $0.10.
    spec = priced_room(stub, queue, {"max_cost_usd_per_run": 0.10}, bid_timeout_s=60)
    client = start(processes, settings, stub, queue)

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


def test_late_answers_and_a_cancelled_turns_count_and_the_room_stops_once_over_its_limit(
        stub, processes, settings, queue):
    usage = {"prompt_tokens": 100, "completion_tokens": 10}  # $0.02 a call at PRICES
    stub.script("alpha",
                tool_call(0.9, "never posted", delay_s=1.5, **usage),  # run 1, cancelled
                tool_call(0.9, "Ship it.", **usage),  # run 2, turn 1
                tool_call(0.2, "-", delay_s=1.0, **usage))  # turn 2
    stub.script("beta",
                tool_call(0.9, "never posted", delay_s=1.5, **usage),
                # 2.74 s: past the 2.5 s deadline, within the attempt's timeout (the time
                # left rounded up to 3 s): a late answer, paid for.
                tool_call(0.9, "too late", delay_s=2.74, **usage),
                tool_call(0.9, "Second.", **usage))
    spec = priced_room(stub, queue, {"max_cost_usd_per_room": 0.10}, bid_timeout_s=2.5)
    client = start(processes, settings, stub, queue)
    warm_up(client, spec)
    room = client.create_room(spec)

    client.post(room, "Launch next week?")
    wait_until(lambda: len(stub.requests_for("alpha")) == len(stub.requests_for("beta")) == 1,
               30, "run 1's calls to reach the model")
    client.cancel(room, "changed my mind")
    # Its two answers land after the cancel: $0.04, paid and counted.
    wait_until(lambda: client.state(room).usage.cost_usd == pytest.approx(0.04), 15,
               "the cancelled turn's answers to be counted")
    result = client.wait(room, client.post(room, "Then the week after?"), timeout_s=60)

    # Run 2: $0.06 spent before its first turn, $0.12 after its second (beta's late answer
    # included), past the $0.10: no third turn is asked for.
    assert [(m.sender, m.content) for m in result.messages][-3:] == [
        ("User", "Then the week after?"), ("alpha", "Ship it."), ("beta", "Second.")]
    assert (result.status, result.stop_reason) == ("idle", StopReason.BUDGET)
    assert result.stop_detail == ("limits.max_cost_usd_per_room reached: this room's calls cost "
                                  "$0.12, the limit is $0.1")
    state = client.state(room)
    assert (state.usage.prompt_tokens, state.usage.completion_tokens) == (600, 60)
    assert state.usage.cost_usd == pytest.approx(0.12)
    first, second = client.turns(room)
    assert {b.agent: b.status for b in first.bids} == {"alpha": AnswerStatus.OK,
                                                       "beta": AnswerStatus.TIMEOUT}
    assert [(b.agent, b.turn, b.message) for b in second.late] == [
        ("beta", first.turn, "too late")]
    assert second.cost_usd == pytest.approx(0.06)
    # Each call's output was capped at what the dollars left bought at $0.001 a token.
    for name in ("alpha", "beta"):
        assert [r.body["max_tokens"] for r in stub.requests_for(name)] == [100, 60, 40]


def warm_up(client: Client, spec: RoomSpec) -> None:
    """A first run on the same worker and stub, unhurried: litellm is imported and its
    token counting loaded before the timed runs."""
    agents = [agent.model_copy(update={"model": "openai/warm"}) for agent in spec.agents]
    warm = spec.model_copy(update={"agents": agents, "limits": RoomLimits(),
                                   "policy": BidPolicy(bid_timeout_s=60)})
    assert client.run(warm, "warm up", timeout_s=120).stop_reason is StopReason.LULL
