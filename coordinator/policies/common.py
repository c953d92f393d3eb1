"""Stops every policy shares: when no agent could answer at all, the room cannot work.

The all-failed stop lists the agents' recorded errors with a likely fix (each distinct
error and fix said once, with the agents it applies to), chosen by the kind of failure the
answer carries (``ErrorKind``, set where the call failed: the worker, or the coordinator
for an answer that never came), naming the key variable the answer's ``error_variable``
names (a field set by the worker, never read from the error's text):

==========================  ================================================================
kind (shared.models)        likely fix
==========================  ================================================================
``missing_key``             set the key's variable on the workers (named when the answer does)
``key_not_allowed``         use a variable in PARLEY_WORKER_KEY_ENVS, or add it (named) there
``api_base_not_allowed``    add the base to PARLEY_WORKER_ALLOWED_API_BASES
``auth``                    check the key's value
``unknown_provider``        prefix the model with its provider
``unsupported_params``      remove them, or set drop_params
``tools_unsupported``       use a model with function calling
``no_tool_call``            use a model with function calling
``not_found``               check the model name
``context_window``          set max_context_tokens
``rate_limit``              lower the rate or raise the quota
``timeout``                 raise timeout_s or the policy's bid_timeout_s
``no_answer``               check that a worker consumes the agent's queue
``connection``              check api_base and that the workers reach it
``provider_error``          check the provider's status, or use another model
``unparsed``, ``scripted``  none: the error text says what happened
``cancelled``               none: an operator set the agent to only listen
``budget``                  raise the spec's limits, or wait for the next run (per-run ones)
``other``                   none
==========================  ================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from parley.coordinator.policies.base import Decision, TurnView, stopped
from parley.shared.models import Answer, AnswerStatus, ErrorKind, RoomSpec, StopReason

FUNCTION_CALLING_FIX = "use a model that supports function calling (tool calls)"

# No fix holds "; ": it separates the agents' entries in the all-failed detail.
FIXES: dict[ErrorKind, str] = {
    ErrorKind.MISSING_KEY: ("set the provider's API key variable on the workers, or name the "
                            "key's variable in the agent's api_key_env"),
    ErrorKind.KEY_NOT_ALLOWED: ("name a variable listed in the workers' PARLEY_WORKER_KEY_ENVS "
                                "as the agent's api_key_env, or have the operator add the "
                                "agent's variable there"),
    ErrorKind.API_BASE_NOT_ALLOWED: (
        "have the workers' operator add the agent's api_base (or the endpoint named) to "
        "PARLEY_WORKER_ALLOWED_API_BASES, or use the provider's default endpoint"),
    ErrorKind.AUTH: ("the provider refused the API key: check the value of the variable the "
                     "agent's api_key_env names (or of the provider's default key variable)"),
    ErrorKind.UNKNOWN_PROVIDER: ("prefix the model with its provider, as litellm spells it "
                                 "(e.g. openai/gpt-4o-mini)"),
    ErrorKind.UNSUPPORTED_PARAMS: ("remove the parameters the provider does not support from "
                                   "the agent, or set litellm_kwargs: {drop_params: true}"),
    ErrorKind.TOOLS_UNSUPPORTED: FUNCTION_CALLING_FIX,
    ErrorKind.NO_TOOL_CALL: FUNCTION_CALLING_FIX,
    ErrorKind.NOT_FOUND: "check the model name (provider/model, as litellm spells it)",
    ErrorKind.CONTEXT_WINDOW: "set the agent's max_context_tokens to the model's real context window",
    ErrorKind.RATE_LIMIT: "lower the request rate or raise the provider's quota",
    ErrorKind.TIMEOUT: ("raise the agent's timeout_s or the policy's bid_timeout_s "
                        "(call_timeout_s in a selector or round-table room)"),
    ErrorKind.NO_ANSWER: ("check that a worker consumes the agent's queue, or raise the "
                          "policy's bid_timeout_s (call_timeout_s in a selector or "
                          "round-table room)"),
    ErrorKind.CONNECTION: "check the agent's api_base and that the workers can reach it",
    ErrorKind.PROVIDER_ERROR: "the provider failed: check its status, or use another model",
    ErrorKind.BUDGET: ("raise the spec's limits (limits.*), or post again for a new run when "
                       "a per-run limit was reached"),
    ErrorKind.TOOL_UNAVAILABLE: ("run the agent's queue on workers whose PARLEY_WORKER_TOOLS "
                                 "or PARLEY_WORKER_MCP_CONFIG offer the tool (parley tools "
                                 "lists what live workers offer)"),
}



def _missing_key_fix(variable: str, key_env: str | None) -> str:
    """Name the unset variable: the agent's api_key_env, or the provider's own."""
    if variable and variable == key_env:
        return (f"set {variable} in the environment of the workers serving this agent "
                "(the variable its api_key_env names)")
    if variable:
        return (f"set {variable} on the workers, or name the key's variable in the "
                "agent's api_key_env")
    return ""


def _key_not_lent_fix(variable: str, key_env: str | None) -> str:
    """Name the variable the workers do not lend."""
    if not variable:
        return ""
    return (f"name a variable listed in the workers' PARLEY_WORKER_KEY_ENVS as the agent's "
            f"api_key_env, or have the operator add {variable} there")


# Refinements: where the answer names the variable to set, the fix names it too.
REFINEMENTS: dict[ErrorKind, Callable[[str, str | None], str]] = {
    ErrorKind.MISSING_KEY: _missing_key_fix,
    ErrorKind.KEY_NOT_ALLOWED: _key_not_lent_fix,
}


def likely_fix(kind: ErrorKind, variable: str = "", key_env: str | None = None) -> str:
    """A one-line suggestion for a failure of this kind, naming ``variable`` (the key
    variable the failed answer names; ``key_env``, the agent's own api_key_env), or an
    empty string when the error says all there is."""
    refine = REFINEMENTS.get(kind)
    return (refine(variable, key_env) if refine else "") or FIXES.get(kind, "")


def nobody_answered(answers: list[Answer]) -> bool:
    """True when every call of the turn so far timed out."""
    return bool(answers) and all(answer.status is AnswerStatus.TIMEOUT for answer in answers)


def failure_stop(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision | None:
    """Stop the run when no answer arrived at all, or when every agent failed on turn one.

    A failing agent is silent, as in swarms; but a room where nobody can answer is broken,
    and its operator needs to know why rather than see an unexplained lull.
    """
    if nobody_answered(answers):
        queues = ", ".join(sorted({agent.queue for agent in spec.callers}))
        detail = (
            f"no agent answered within {spec.policy.call_timeout:g}s: is a parley worker "
            f"running and consuming queue {queues}?"
        )
        return stopped(StopReason.NO_BIDS, view.recent, detail)
    if view.run_turns == 1 and answers and all(
            answer.failed or answer.status is AnswerStatus.TIMEOUT for answer in answers):
        return stopped(StopReason.ALL_FAILED, view.recent, all_failed_detail(spec, answers))
    return None


def all_failed_detail(spec: RoomSpec, answers: list[Answer]) -> str:
    """Each distinct error once, after the agents it failed (``A, C: error``), and each
    distinct likely fix once, after the entries it applies to; entries joined by
    semicolons, in the order the agents first appear."""
    by_fix: dict[str, dict[str, list[str]]] = {}
    for answer in answers:
        fix = likely_fix(answer.error_kind, answer.error_variable, key_env_of(spec, answer))
        by_fix.setdefault(fix, {}).setdefault(failure_reason(answer), []).append(answer.agent)
    return "; ".join(fixed_entries(fix, agents_by_reason)
                     for fix, agents_by_reason in by_fix.items())


def fixed_entries(fix: str, agents_by_reason: dict[str, list[str]]) -> str:
    """The entries one fix applies to, the fix said once after the last of them (naming
    its agents when they failed with different errors)."""
    entries = "; ".join(f"{', '.join(agents)}: {reason}"
                        for reason, agents in agents_by_reason.items())
    if not fix:
        return entries
    if len(agents_by_reason) == 1:
        return f"{entries} (likely fix: {fix})"
    agents = ", ".join(agent for group in agents_by_reason.values() for agent in group)
    return f"{entries} (likely fix for {agents}: {fix})"


def key_env_of(spec: RoomSpec, answer: Answer) -> str | None:
    """The ``api_key_env`` the answer's agent names in the spec, if any."""
    return next((agent.api_key_env for agent in spec.callers if agent.name == answer.agent),
                None)


def failure_line(spec: RoomSpec, answer: Answer) -> str:
    """``agent: error (likely fix: ...)``: what failed, and what to do about it."""
    fix = likely_fix(answer.error_kind, answer.error_variable, key_env_of(spec, answer))
    return f"{answer.agent}: {failure_reason(answer)}" + (f" (likely fix: {fix})" if fix else "")


def usable(answer: Answer) -> bool:
    """True when the answer holds text to post: the call worked and said something."""
    return answer.status is AnswerStatus.OK and bool(answer.message.strip())


def failure_reason(answer: Answer) -> str:
    """Why an answer that is not usable has nothing to post: its error, or that it was
    empty (a reply cut to nothing, or only whitespace)."""
    if answer.error:
        return answer.error
    return "an empty reply" if answer.status is AnswerStatus.OK else answer.status.value


def could_not_respond(answer: Answer) -> str:
    """The note posted for an agent whose call failed or said nothing."""
    return f"({answer.agent} could not respond: {failure_reason(answer)})"
