"""Spending limits, shared by every floor policy: a spec's ``limits``.

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
what counts            every committed call of every kind (bids, selector picks,
                       replies): prompt plus completion tokens, and cost in US dollars
when                   before a turn, never inside one: a turn that starts below every
                       limit runs to its end, so a total may pass its limit by at most
                       one turn's calls
reaching a limit       stops: a total equal to its limit leaves nothing to spend, so
                       no turn starts (a turn never costs less than nothing)
which limit            the room's before the run's, tokens before cost: the detail
                       names the first reached, its figures and the limit
the stop               ``budget``; the room goes idle. A post starts a new run: the
                       run's totals start again from 0, the room's never do
=====================  =================================================================
"""

from __future__ import annotations

from typing import NamedTuple

from parley.coordinator.policies.base import Decision, TurnView, stopped
from parley.shared.models import RoomLimits, StopReason, Usage


class Limit(NamedTuple):
    """One spending limit as checked: its field, its value, and what it is measured on."""

    field: str
    limit: float | None
    usage: Usage
    scope: str  # "room" or "run"
    tokens: bool  # tokens, else cost


def limits_of(limits: RoomLimits, view: TurnView) -> tuple[Limit, ...]:
    """The room's limits in the order they are checked, each with the totals it bounds."""
    return (
        Limit("max_tokens_per_room", limits.max_tokens_per_room, view.room_usage, "room", True),
        Limit("max_cost_usd_per_room", limits.max_cost_usd_per_room, view.room_usage, "room",
              False),
        Limit("max_tokens_per_run", limits.max_tokens_per_run, view.run_usage, "run", True),
        Limit("max_cost_usd_per_run", limits.max_cost_usd_per_run, view.run_usage, "run", False),
    )


def budget_stop(limits: RoomLimits, view: TurnView) -> Decision | None:
    """Stop the run with ``budget`` when a total has reached its limit, else None."""
    for limit in limits_of(limits, view):
        spent = limit.usage.tokens if limit.tokens else limit.usage.cost_usd
        if limit.limit is not None and spent >= limit.limit:
            return stopped(StopReason.BUDGET, view.recent, budget_detail(limit))
    return None


def budget_detail(limit: Limit) -> str:
    """Which limit was reached, and the figures: e.g. ``limits.max_tokens_per_run
    reached: this run's calls used 1,210 tokens (1,100 prompt + 110 completion), the
    limit is 1,000``."""
    usage = limit.usage
    if limit.tokens:
        spent = (f"used {usage.tokens:,} tokens ({usage.prompt_tokens:,} prompt + "
                 f"{usage.completion_tokens:,} completion)")
        bound = f"{int(limit.limit or 0):,}"
    else:
        spent, bound = f"cost {dollars(usage.cost_usd)}", dollars(limit.limit or 0.0)
    return f"limits.{limit.field} reached: this {limit.scope}'s calls {spent}, the limit is {bound}"


def dollars(amount: float) -> str:
    """An amount of US dollars to the millionth of a cent, without trailing zeros."""
    digits = f"{amount:,.8f}".rstrip("0").rstrip(".")
    return f"${digits}"
