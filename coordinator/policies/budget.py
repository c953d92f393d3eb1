"""Spending limits, shared by every floor policy: a spec's ``limits``.

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
what counts            every answer that reached Redis, of every call kind (bids,
                       selector picks, replies), late or of an abandoned turn: prompt
                       plus completion tokens, and cost in US dollars
when                   before a turn: a turn that starts below every limit runs to its
                       end
each call's cap        what is left as the call goes out: its output (max_tokens) is
                       capped at the tokens left, and at the dollars left at the model's
                       output price where the worker knows it; a total may so pass its
                       limit by the turn's prompts and by its other calls' outputs
nothing left           for a later phase of the turn, or a total reached meanwhile: its
                       calls are not made (answers of kind ``budget``), and a phase with
                       none made stops the run ``budget`` with their detail
reaching a limit       stops: a total equal to its limit leaves nothing to spend, so
                       no turn starts (a turn never costs less than nothing)
which limit            the room's before the run's, then its organization's of the day
                       (``max_tokens_per_day``, ``max_cost_usd_per_day``, over every
                       room of the organization, UTC days), tokens before cost: the
                       detail names the first reached, its figures and the limit
the stop               ``budget``; the room goes idle. A post starts a new run: the
                       run's totals start again from 0, the room's never do
=====================  =================================================================
"""

from __future__ import annotations

from typing import NamedTuple

from parley.coordinator.policies.base import Decision, TurnView, stopped
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    ErrorKind,
    RoomLimits,
    StopReason,
    Usage,
)
from parley.shared.organizations import OrgLimits


class Limit(NamedTuple):
    """One spending limit as checked: its field, its value, and what it is measured on."""

    field: str
    limit: float | None
    usage: Usage
    scope: str  # "room", "run" or "organization"
    tokens: bool  # tokens, else cost
    name: str = ""  # how the detail names it: limits.<field> unless given
    whose: str = ""  # whose calls the detail says spent it: this <scope>'s unless given


def limits_of(limits: RoomLimits, run_usage: Usage, room_usage: Usage) -> tuple[Limit, ...]:
    """The room's limits in the order they are checked, each with the totals it bounds."""
    return (
        Limit("max_tokens_per_room", limits.max_tokens_per_room, room_usage, "room", True),
        Limit("max_cost_usd_per_room", limits.max_cost_usd_per_room, room_usage, "room", False),
        Limit("max_tokens_per_run", limits.max_tokens_per_run, run_usage, "run", True),
        Limit("max_cost_usd_per_run", limits.max_cost_usd_per_run, run_usage, "run", False),
    )


def org_limits_of(organization: str, limits: OrgLimits, usage: Usage) -> tuple[Limit, ...]:
    """The organization's daily limits, each with the organization's totals of the day."""
    whose = f"organization {organization}'s calls today"
    return tuple(
        Limit(field, getattr(limits, field), usage, "organization", tokens,
              f"organization {organization}'s {field}", whose)
        for field, tokens in (("max_tokens_per_day", True), ("max_cost_usd_per_day", False)))


def first_reached(bounds: tuple[Limit, ...]) -> Limit | None:
    """The first of ``bounds`` its totals have reached, else None."""
    return next((limit for limit in bounds
                 if limit.limit is not None and spent(limit) >= limit.limit), None)


def left_in(bounds: tuple[Limit, ...]) -> Left:
    """What is left of ``bounds``, none of them reached."""
    tokens = [int(limit.limit - spent(limit)) for limit in bounds
              if limit.limit is not None and limit.tokens]
    dollars = [limit.limit - spent(limit) for limit in bounds
               if limit.limit is not None and not limit.tokens]
    return Left(min(tokens, default=None), min(dollars, default=None))


class Left(NamedTuple):
    """What is left of a room's limits for the calls going out now: tokens and dollars,
    the least of the room's and the run's (None where neither is set)."""

    tokens: int | None
    cost_usd: float | None


def has_limits(limits: RoomLimits) -> bool:
    """True when the spec sets any spending limit."""
    return any(value is not None for value in limits.model_dump().values())


def spent(limit: Limit) -> float:
    """What the limit's totals have spent of what it bounds."""
    return limit.usage.tokens if limit.tokens else limit.usage.cost_usd


def reached(limits: RoomLimits, run_usage: Usage, room_usage: Usage) -> Limit | None:
    """The first limit (in checking order) its totals have reached, else None."""
    return first_reached(limits_of(limits, run_usage, room_usage))


def left_of(limits: RoomLimits, run_usage: Usage, room_usage: Usage) -> Left:
    """What is left of the limits, none of them reached."""
    return left_in(limits_of(limits, run_usage, room_usage))


def budget_stop(limits: RoomLimits, view: TurnView) -> Decision | None:
    """Stop the run with ``budget`` when a total has reached its limit, else None."""
    limit = reached(limits, view.run_usage, view.room_usage)
    return stopped(StopReason.BUDGET, view.recent, budget_detail(limit)) if limit else None


def not_made(agent: str, turn: int, kind: CallKind, phase: int, call: int, limit: Limit
             ) -> Answer:
    """The answer of a call not made because ``limit`` was reached when it was due."""
    return Answer(agent=agent, turn=turn, kind=kind, phase=phase, call=call,
               status=AnswerStatus.ERROR, error=budget_detail(limit), error_kind=ErrorKind.BUDGET)


def unaffordable_stop(view: TurnView, answers: list[Answer]) -> Decision | None:
    """Stop the run with ``budget`` when none of the latest phase's calls could be made
    for want of budget (the detail is their answers' own), else None."""
    if not answers:
        return None
    phase = [answer for answer in answers if answer.phase == answers[-1].phase]
    if all(answer.error_kind is ErrorKind.BUDGET for answer in phase):
        return stopped(StopReason.BUDGET, view.recent, phase[0].error)
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
    name, whose = limit.name or f"limits.{limit.field}", limit.whose or f"this {limit.scope}'s calls"
    return f"{name} reached: {whose} {spent}, the limit is {bound}"


def dollars(amount: float) -> str:
    """An amount of US dollars to the millionth of a cent, without trailing zeros."""
    digits = f"{amount:,.8f}".rstrip("0").rstrip(".")
    return f"${digits}"
