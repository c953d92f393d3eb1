"""Prometheus metrics of the coordinator and worker processes: the metric objects, and the
small functions that update them from facts the processes already hold (a committed turn
record, an answer written).

Each process counts what it sees, so the ``job`` label of a scrape tells them apart:

=============================  ================================  ===========================
metric                         labels                            counted by
=============================  ================================  ===========================
parley_turns_total             organization                      coordinator, at commit
parley_turn_seconds            organization                      coordinator, at commit
parley_turn_added_seconds      organization                      coordinator, at commit
parley_answers_total           organization, kind, status        both (recorded / written)
parley_timeouts_total          organization                      coordinator, at commit
parley_failures_total          organization, kind (ErrorKind)    both (recorded / written)
parley_takeovers_total                                           coordinator
parley_lease_renewals_total                                      coordinator
parley_lease_losses_total                                        coordinator
parley_rooms_held              coordinator                       coordinator
parley_call_messages_total                                       coordinator, as it publishes
parley_calls_sent_total                                          coordinator, as it publishes
parley_tokens_total            organization, model, direction    worker
                               (prompt, completion, cached)
parley_cost_usd_total          organization, model               worker
parley_tool_calls_total        organization, tool, status        worker, as each tool call ends
parley_tool_seconds            organization, tool                worker, as each tool call ends
=============================  ================================  ===========================

The worker counts every answer it wrote (late ones and re-asked ones too: they cost tokens);
the coordinator counts the answers each committed turn recorded (timeouts included).
Metrics live in the process's default registry: a worker must run a threads (or gevent)
pool for its answers to be counted where its /metrics is served.
"""

from __future__ import annotations

from threading import Lock

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

from parley.shared.models import (
    DEFAULT_ORGANIZATION,
    Answer,
    AnswerStatus,
    CallRequest,
    ErrorKind,
    TurnRecord,
)

# From a scripted turn (about a millisecond) to a slow model's (a minute).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0, 20.0, 30.0, 60.0)
# Models are named by specs, which anyone creating rooms writes: past this many distinct
# names, further ones are counted as "other", so a scrape stays bounded.
MOST_MODELS = 200
OTHER_MODEL = "other"
# Organizations are named by whoever creates rooms with Redis access: bounded the same way.
MOST_ORGANIZATIONS = 1000

# A ``_created`` timestamp beside every counter doubles a scrape for nothing Prometheus uses.
disable_created_metrics()

TURNS = Counter("parley_turns", "Turns committed, by the room's organization", ["organization"])
TURN_SECONDS = Histogram("parley_turn_seconds", "A turn's time from opened to decided",
                         ["organization"], buckets=LATENCY_BUCKETS_S)
TURN_ADDED_SECONDS = Histogram(
    "parley_turn_added_seconds",
    "A turn's time beyond its slowest answer in each phase (turns every call answered)",
    ["organization"], buckets=LATENCY_BUCKETS_S)
ANSWERS = Counter("parley_answers", "Answers to calls, by organization, call kind and status",
                  ["organization", "kind", "status"])
TIMEOUTS = Counter("parley_timeouts", "Calls that did not answer before the deadline",
                   ["organization"])
FAILURES = Counter("parley_failures", "Failed calls, by organization and error kind",
                   ["organization", "kind"])
TAKEOVERS = Counter("parley_takeovers", "Open turns resumed from a previous holder")
LEASE_RENEWALS = Counter("parley_lease_renewals", "Room leases renewed")
LEASE_LOSSES = Counter("parley_lease_losses",
                       "Rooms dropped because their lease was lost or not renewed in time")
ROOMS_HELD = Gauge("parley_rooms_held", "Rooms a coordinator serves now", ["coordinator"])
# Their ratio is the calls per task message: near 1 room's calls at light load, up to
# agents_per_task when many rooms' calls share messages.
CALL_MESSAGES = Counter("parley_call_messages", "Call task messages published")
CALLS_SENT = Counter("parley_calls_sent", "Calls sent to workers, in all task messages")
TOKENS = Counter("parley_tokens", "Tokens of model calls, by organization, model and "
                 "direction", ["organization", "model", "direction"])
COST = Counter("parley_cost_usd", "Cost of model calls in US dollars, by organization and "
               "model", ["organization", "model"])

TOOL_CALLS = Counter("parley_tool_calls", "Tool calls of agents, by organization, tool and "
                     "status", ["organization", "tool", "status"])
TOOL_SECONDS = Histogram("parley_tool_seconds", "A tool call's time, by organization and tool",
                         ["organization", "tool"], buckets=LATENCY_BUCKETS_S)

_models: set[str] = set()
_models_lock = Lock()
_organizations: set[str] = set()


def observe_turn(record: TurnRecord, organization: str = DEFAULT_ORGANIZATION) -> None:
    """Count a committed turn of a room of ``organization``: its duration, added latency
    and every recorded answer."""
    org = organization_label(organization)
    TURNS.labels(organization=org).inc()
    TURN_SECONDS.labels(organization=org).observe(max(0.0, record.decided_at - record.opened_at))
    added = added_seconds(record)
    if added is not None:
        TURN_ADDED_SECONDS.labels(organization=org).observe(added)
    for bid in record.bids:
        count_answer(bid, org)
        if bid.status is AnswerStatus.TIMEOUT:
            TIMEOUTS.labels(organization=org).inc()


def observe_message(message: list[CallRequest]) -> None:
    """Count a published task message and the calls it carries."""
    CALL_MESSAGES.inc()
    CALLS_SENT.inc(sum(len(request.agents) for request in message))


def added_seconds(record: TurnRecord) -> float | None:
    """What the turn took beyond waiting for its answers: its duration less the slowest
    answer of each phase. None when a call timed out (the turn then waited for the deadline,
    not for an answer)."""
    if any(bid.status is AnswerStatus.TIMEOUT for bid in record.bids):
        return None
    slowest: dict[int, float] = {}
    for bid in record.bids:
        slowest[bid.phase] = max(slowest.get(bid.phase, 0.0), bid.latency_ms / 1000)
    return max(0.0, record.decided_at - record.opened_at - sum(slowest.values()))


def count_answer(bid: Answer, org: str) -> None:
    """Count one answer of organization label ``org`` by kind and status, and its failure
    by kind."""
    ANSWERS.labels(organization=org, kind=bid.kind.value, status=bid.status.value).inc()
    if bid.error_kind is not ErrorKind.NONE:
        FAILURES.labels(organization=org, kind=bid.error_kind.value).inc()


def observe_answer(bid: Answer, model: str, organization: str = DEFAULT_ORGANIZATION) -> None:
    """Count an answer a worker wrote: the answer, and its tokens and cost by the room's
    organization and the model."""
    org, label = organization_label(organization), model_label(model)
    count_answer(bid, org)
    TOKENS.labels(organization=org, model=label, direction="prompt").inc(bid.prompt_tokens)
    TOKENS.labels(organization=org, model=label, direction="completion").inc(
        bid.completion_tokens)
    if bid.cached_tokens:  # of the prompt tokens, those read from the provider's cache
        TOKENS.labels(organization=org, model=label, direction="cached").inc(bid.cached_tokens)
    COST.labels(organization=org, model=label).inc(bid.cost_usd)


def organization_label(organization: str) -> str:
    """The organization's label value: its name, or ``other`` past MOST_ORGANIZATIONS."""
    with _models_lock:
        if organization in _organizations or len(_organizations) < MOST_ORGANIZATIONS:
            _organizations.add(organization)
            return organization
    return OTHER_MODEL


def model_label(model: str) -> str:
    """The model's label value: its name, or ``other`` once MOST_MODELS names are in use."""
    with _models_lock:
        if model in _models:
            return model
        if len(_models) < MOST_MODELS:
            _models.add(model)
            return model
    return OTHER_MODEL


def observe_tool_call(tool: str, status: str, seconds: float,
                      organization: str = DEFAULT_ORGANIZATION) -> None:
    """Count a tool call of a room of ``organization`` that ended (tools are the
    operator's: their names are bounded)."""
    org = organization_label(organization)
    TOOL_CALLS.labels(organization=org, tool=tool, status=status).inc()
    TOOL_SECONDS.labels(organization=org, tool=tool).observe(seconds)
