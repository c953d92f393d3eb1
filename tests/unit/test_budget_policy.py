"""Spending limits, one rule per test: every policy stops a run with ``budget`` before a
turn once the run's or the room's calls have reached a limit (reaching it is enough)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from parley.coordinator import policies
from parley.coordinator.policies import Calls, Decision, TurnView
from parley.shared.models import CallKind, RoomSpec, RoomStatus, StopReason, Usage

AGENTS = ("A", "B")


def spec(kind: str = "bid", **limits: Any) -> RoomSpec:
    policy: dict[str, Any] = {"kind": kind}
    if kind == "selector":
        policy["selector"] = {"model": "scripted", "script": []}
    return RoomSpec.model_validate({
        "policy": policy, "limits": limits,
        "agents": [{"name": name, "model": "scripted", "script": []} for name in AGENTS],
    })


NOTHING = Usage()


def view(run: Usage = NOTHING, room: Usage | None = None, messages_in_run: int = 3) -> TurnView:
    return TurnView(turn=4, run=2, run_turns=3, messages_in_run=messages_in_run, recent=("A",),
                    snapshot_seq=9, run_usage=run, room_usage=room or run)


def tokens(prompt: int, completion: int = 0) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


def cost(usd: float) -> Usage:
    return Usage(cost_usd=usd)


def stop_of(result: Calls | Decision) -> tuple[StopReason | None, str]:
    assert isinstance(result, Decision), result
    return result.stop, result.detail


def test_without_limits_no_total_stops_a_run():
    result = policies.first_calls(spec(), view(Usage(prompt_tokens=10**9, cost_usd=10**6)))
    assert result == Calls(CallKind.BID, AGENTS)


@pytest.mark.parametrize(("limits", "run", "room", "detail"), [
    ({"max_tokens_per_run": 1000}, tokens(900, 110), tokens(5000),
     "limits.max_tokens_per_run reached: this run's calls used 1,010 tokens (900 prompt + "
     "110 completion), the limit is 1,000"),
    ({"max_cost_usd_per_run": 0.05}, cost(0.0512), cost(3.0),
     "limits.max_cost_usd_per_run reached: this run's calls cost $0.0512, the limit is $0.05"),
    ({"max_tokens_per_room": 5000}, tokens(10), tokens(4000, 1000),
     "limits.max_tokens_per_room reached: this room's calls used 5,000 tokens (4,000 prompt + "
     "1,000 completion), the limit is 5,000"),
    ({"max_cost_usd_per_room": 2}, cost(0.0), cost(2.5),
     "limits.max_cost_usd_per_room reached: this room's calls cost $2.5, the limit is $2"),
])
def test_each_limit_stops_the_run_before_a_turn_naming_the_limit_and_figures(
        limits, run, room, detail):
    decision = policies.first_calls(spec(**limits), view(run, room))

    assert stop_of(decision) == (StopReason.BUDGET, detail)
    assert isinstance(decision, Decision)
    assert decision.winner is None and decision.recent == ("A",)
    assert decision.status is RoomStatus.IDLE


@pytest.mark.parametrize(("limits", "under", "at"), [
    ({"max_tokens_per_run": 1000}, tokens(999), tokens(999, 1)),
    ({"max_cost_usd_per_run": 0.5}, cost(0.4999), cost(0.5)),
])
def test_a_total_just_under_its_limit_starts_the_turn_and_one_at_it_stops(limits, under, at):
    assert policies.first_calls(spec(**limits), view(under)) == Calls(CallKind.BID, AGENTS)
    assert stop_of(policies.first_calls(spec(**limits), view(at)))[0] is StopReason.BUDGET


def test_a_token_limit_counts_prompt_and_completion_tokens_together():
    limits = {"max_tokens_per_run": 100}
    assert isinstance(policies.first_calls(spec(**limits), view(tokens(60))), Calls)
    assert stop_of(policies.first_calls(spec(**limits), view(tokens(60, 40))))[0] is StopReason.BUDGET


def test_the_run_limit_reads_the_run_totals_and_the_room_limit_the_rooms():
    run, room = tokens(10), tokens(10_000)
    assert isinstance(policies.first_calls(spec(max_tokens_per_run=100), view(run, room)), Calls)
    stopped = policies.first_calls(spec(max_tokens_per_room=100), view(run, room))
    assert "max_tokens_per_room" in stop_of(stopped)[1]


def test_the_room_limit_is_named_before_the_runs_when_both_are_reached():
    both = spec(max_tokens_per_run=10, max_cost_usd_per_room=1.0)
    spent = Usage(prompt_tokens=50, cost_usd=1.5)
    assert stop_of(policies.first_calls(both, view(spent)))[1].startswith(
        "limits.max_cost_usd_per_room reached")


def test_a_selector_room_stops_on_its_budget_before_asking_the_selector():
    limits = {"max_cost_usd_per_run": 1.0}
    assert policies.first_calls(spec("selector", **limits), view(cost(0.2))) == Calls(
        CallKind.SELECT, ("selector",))
    assert stop_of(policies.first_calls(spec("selector", **limits), view(cost(1.0))))[0] is (
        StopReason.BUDGET)


def test_the_budget_is_checked_before_the_policys_own_cap():
    capped = RoomSpec.model_validate({**spec(max_tokens_per_run=5).model_dump(),
                                      "policy": {"kind": "bid", "max_messages": 3}})
    assert stop_of(policies.first_calls(capped, view(tokens(5), messages_in_run=3)))[0] is (
        StopReason.BUDGET)
    assert stop_of(policies.first_calls(capped, view(tokens(4), messages_in_run=3)))[0] is (
        StopReason.MAX_MESSAGES)


@pytest.mark.parametrize(("limits", "says"), [
    ({"max_tokens_per_run": 0}, "limits.max_tokens_per_run: Input should be greater than or equal to 1"),
    ({"max_tokens_per_room": 10**13}, "limits.max_tokens_per_room: Input should be less than or equal to"),
    ({"max_tokens_per_run": 1.5}, "limits.max_tokens_per_run: Input should be a valid integer"),
    ({"max_cost_usd_per_run": 0}, "limits.max_cost_usd_per_run: Input should be greater than 0"),
    ({"max_cost_usd_per_room": float("inf")}, "limits.max_cost_usd_per_room: Input should be a finite"),
    ({"max_cost_usd_per_room": 2e9}, "limits.max_cost_usd_per_room: Input should be less than or equal to"),
    ({"max_tokens": 100}, "limits.max_tokens: Extra inputs are not permitted: did you mean "
                          "max_tokens_per_run or max_tokens_per_room?"),
])
def test_a_limit_must_be_a_positive_finite_bounded_number(limits, says):
    with pytest.raises(ValidationError) as raised:
        spec(**limits)
    problems = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in raised.value.errors()]
    assert any(problem.startswith(says) for problem in problems), problems


def test_limits_are_optional_and_kept_when_stored():
    limited = spec(max_tokens_per_run=1000, max_cost_usd_per_room=12.5)
    assert RoomSpec.model_validate_json(limited.model_dump_json()).limits == limited.limits
    assert spec().limits.max_tokens_per_run is None
