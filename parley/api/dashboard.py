"""Read-only routes the dashboard page needs beyond the API's own: the rooms overview with
tokens and lease ages; one room's agents, floor share (with its Gini coefficient), token
and cost totals over its turns, failed calls, and what its policy's record says the page
shows of the policy (its state, the calls whose scores it charts); its turns with silent
answers marked.

The figures are computed by the pure functions below from what the room keeps: its log
(floor share), its turn records (usage over time, failures) and its state (totals).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, get_args

from fastapi import APIRouter, Query
from pydantic import BaseModel

from parley.api.rooms import ClientDep, IdentityDep, OrgQuery, with_lease_left
from parley.client import Client
from parley.client.turn_report import read_turn_report
from parley.coordinator.policies import record_of
from parley.shared.models import (
    Answer,
    AnswerStatus,
    Message,
    RoomSpec,
    RoomStatus,
    StopReason,
    TurnRecord,
    Usage,
)
from parley.shared.records import FLOOR_FIELD_PREFIX, RoomState, message_from_fields, usage_from
from parley.shared.tasks import Task, one_line
from parley.shared.tracing import trace_url
from parley.views import documents, explain

# Failed calls listed per room: the newest, enough for a screen.
FAILURES_SHOWN = 50
TASKS_SHOWN = 20  # the newest finished tasks the page lists, with their results
TASK_RESULT_SHOWN = 2000  # characters of a finished task's result the page shows
# The floor share counts the newest messages of the log, at most this many: a room's log may
# be uncapped (log_stream_maxlen 0), and the page asks every few seconds.
FLOOR_WINDOW = 10_000


def gini(values: Iterable[float]) -> float:
    """The Gini coefficient of ``values``: 0 when all are equal (or none is above 0), up
    to (n-1)/n when one holds everything."""
    xs = sorted(float(value) for value in values)
    total = sum(xs)
    if not xs or total <= 0:
        return 0.0
    # Sorted form of the mean absolute difference: sum of (2i - n - 1) x_i over n * total.
    n = len(xs)
    return sum((2 * i - n - 1) * x for i, x in enumerate(xs, start=1)) / (n * total)


def floor_share(messages: Iterable[Message], agents: list[str]) -> dict[str, Any]:
    """Each agent's agent messages (those a turn committed; people's posts are not the
    floor) and share of them, every agent listed even with none, and their Gini."""
    counts = Counter(message.sender for message in messages if message.turn is not None)
    names = [*agents, *sorted(set(counts) - set(agents))]  # a renamed agent still counts
    total = sum(counts.values())
    rows = [{"agent": name, "messages": counts[name],
             "share": counts[name] / total if total else 0.0} for name in names]
    return {"agents": rows, "total": total, "gini": gini(counts[name] for name in names)}


def usage_series(records: Iterable[TurnRecord], totals: Usage) -> list[dict[str, Any]]:
    """The room's token and cost totals after each decided turn, from its turn records.

    Records a stream cap trimmed and calls of abandoned turns are not in the records: what
    they cost (the room's totals less the records' sum) is counted before the first point,
    so the last point is the room's totals as its state has them.
    """
    records = list(records)
    spent = [_turn_usage(record) for record in records]
    running = [totals.prompt_tokens - sum(u.prompt_tokens for u in spent),
               totals.completion_tokens - sum(u.completion_tokens for u in spent),
               totals.cost_usd - sum(u.cost_usd for u in spent)]
    running = [max(0, value) for value in running]
    points = []
    for record, usage in zip(records, spent, strict=True):
        running = [running[0] + usage.prompt_tokens, running[1] + usage.completion_tokens,
                   running[2] + usage.cost_usd]
        points.append({"turn": record.turn, "run": record.run, "ts": record.decided_at,
                       "prompt_tokens": running[0], "completion_tokens": running[1],
                       "cost_usd": round(running[2], 8)})
    return points


def _turn_usage(record: TurnRecord) -> Usage:
    return Usage(prompt_tokens=sum(bid.prompt_tokens for bid in record.bids),
                 completion_tokens=sum(bid.completion_tokens for bid in record.bids),
                 cost_usd=sum(bid.cost_usd for bid in record.bids))


def failures(records: Iterable[TurnRecord], limit: int = FAILURES_SHOWN) -> list[dict[str, Any]]:
    """The newest failed calls (timed out, errored, unparsed), newest first, each with its
    turn, agent, status, error kind and error."""
    failed = [{"turn": record.turn, "run": record.run, "agent": bid.agent,
               "kind": bid.kind.value, **explain.call_outcome(bid)}
              for record in records for bid in record.bids if bid.status is not AnswerStatus.OK]
    return failed[::-1][:limit]


def policy_view(spec: RoomSpec) -> dict[str, Any]:
    """The room's policy settings the page shows (its threshold, caps); the agent specs a
    policy holds (a selector, a classifier) are left out."""
    fields = type(spec.policy).model_fields
    held = {name for name, info in fields.items() if holds_model(info.annotation)}
    return spec.policy.model_dump(mode="json", exclude=held)


def agent_cards(spec: RoomSpec, tasks: list[Task] | None = None) -> list[dict[str, Any]]:
    """The room's agents in spec order, as the page presents them: name, role,
    description, model, and the background tasks it has running."""
    return [{"name": agent.name, "role": agent.role, "description": agent.description,
             "model": agent.model,
             "running": [task_card(task) for task in tasks or ()
                         if task.agent == agent.name and task.is_open]}
            for agent in spec.agents]


def task_card(task: Task) -> dict[str, Any]:
    """A task as the page shows it: its id, who works it, its state and what it came to."""
    return {"id": task.short_id, "agent": task.agent, "worker": task.worker,
            "status": task.status, "instruction": one_line(task.instruction, 120),
            "result": task.result[:TASK_RESULT_SHOWN], "error": task.error,
            "progress": one_line(task.progress, 80)}


def marked_silent(turns: dict[str, Any], spec: RoomSpec, answers: dict[int, list[Answer]]
                  ) -> dict[str, Any]:
    """``parley turns --json``'s document with each answer marked ``silent`` or not."""
    for turn in [*turns["turns"], *([turns["open_turn"]] if turns["open_turn"] else [])]:
        for shown, answer in zip(turn["answers"], answers[turn["turn"]], strict=True):
            shown["silent"] = explain.is_silent_answer(spec, answer)
    return turns


def holds_model(annotation: Any) -> bool:
    """True when a field's type is (or may be) a model of its own, not a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(holds_model(arg) for arg in get_args(annotation))


def policy_fields(state: RoomState) -> dict[str, str]:
    """The policy's fields of the room's state: its per-run ones by name, its room-scoped
    ones as ``floor:<field>``."""
    return {**state.policy_state,
            **{f"{FLOOR_FIELD_PREFIX}{name}": value for name, value in state.floor_state.items()}}


def policy_state_view(spec: RoomSpec, policy_state: Mapping[str, str],
                      ended: StopReason | None = None) -> dict[str, Any] | None:
    """What the page shows of the room's policy state, as its record says (a round-table's
    panel position and its line, that a mention room's page follows its speak queue);
    None when it shows nothing. ``ended``: why the run ended, None while it runs."""
    return record_of(spec).dashboard_state(spec, policy_state, ended)


router = APIRouter(prefix="/dashboard", tags=["dashboard"])


@router.get("/rooms")
def rooms_overview(client: ClientDep, identity: IdentityDep, org: OrgQuery = None,
                   limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    """The rooms list of the token's organization (a cluster-admin's: every one's, or the
    ``org`` chosen) with each room's tokens and its lease's age; ``identity`` says who
    the page is, so that a cluster-admin's page offers the choice."""
    return {"rooms": overview(client, limit, identity.scope(org)),
            "identity": {"organization": identity.organization, "role": identity.role.value}}


@router.get("/rooms/{room}/turns")
def room_turns(room: str, client: ClientDep,
               last: Annotated[int | None, Query(ge=0, description="Only the newest N "
                                                 "decided turns")] = None) -> dict[str, Any]:
    """The room's turns as `GET /rooms/{room}/turns` has them, each answer marked
    ``silent`` when its agent chose to say nothing (the page's turn table)."""
    _, spec = client.store.read_spec(room)
    report = read_turn_report(client.store, room, last)
    answers = {turn.turn: turn.bids for turn in report.turns}
    if report.open_turn:
        answers[report.open_turn.turn] = report.open_turn.answers
    return with_trace_urls(marked_silent(documents.turns_json(report), spec, answers),
                           client.settings.trace_url)


def with_trace_urls(turns: dict[str, Any], template: str) -> dict[str, Any]:
    """Each decided turn with the link to its trace (PARLEY_TRACE_URL; None without)."""
    for turn in turns["turns"]:
        turn["trace_url"] = trace_url(template, turn.get("trace_id") or "") or None
    return turns


@router.get("/rooms/{room}/stats")
def room_stats(room: str, client: ClientDep) -> dict[str, Any]:
    """One room's floor share and Gini, usage over time, failed calls, policy settings and
    what the page shows of the policy's state."""
    return stats(client, room)


def overview(client: Client, limit: int, organization: str | None = None
             ) -> list[dict[str, Any]]:
    """The room summaries (most recent first, of ``organization`` only when given) with
    their lease's time left, how long ago it was taken or last renewed, and the room's
    tokens."""
    rows = with_lease_left(client, [summary.model_dump(mode="json")
                                    for summary in client.rooms(limit, organization)])
    pipe = client.redis.pipeline(transaction=False)
    for row in rows:
        pipe.hmget(client.store.keys.state(row["room"]), "prompt_tokens", "completion_tokens")
    for row, (prompt, completion) in zip(rows, pipe.execute(), strict=True):
        row["lease_age_s"] = lease_age(row["lease_ttl_left_s"], client.settings.lease_ttl_s)
        row["prompt_tokens"] = int(float(prompt or 0))
        row["completion_tokens"] = int(float(completion or 0))
    return rows


def lease_age(left_s: float | None, lease_ttl_s: float) -> float | None:
    """Seconds since a lease with ``left_s`` to live was taken or last renewed (None: no
    lease)."""
    return None if left_s is None else round(max(0.0, lease_ttl_s - left_s), 3)


def newest_messages(client: Client, room: str, count: int) -> list[Message]:
    """The newest ``count`` messages of the room's log, newest first."""
    entries: Any = client.redis.xrevrange(client.store.keys.log(room), "+", "-", count=count)
    return [message_from_fields(fields) for _, fields in entries]


def stats(client: Client, room: str) -> dict[str, Any]:
    """What the room page charts: floor share, usage over time, failures, the policy's
    settings, what it shows of the policy's state, and the calls whose scores it shows."""
    state = client.state(room)
    _, spec = client.store.read_spec(room)
    records = client.turns(room)
    agents = [agent.name for agent in spec.agents]
    ended = state.stop_reason if state.status is not RoomStatus.RUNNING else None
    tasks = client.tasks(room)
    return {"room": room, "policy": policy_view(spec), "agents": agent_cards(spec, tasks),
            "tasks": [task_card(task) for task in tasks[-TASKS_SHOWN:] if not task.is_open],
            "floor": floor_share(newest_messages(client, room, FLOOR_WINDOW), agents),
            "usage": {"totals": usage_from(state.raw).model_dump(),
                      "points": usage_series(records, state.usage)},
            "failures": failures(records),
            "policy_state": policy_state_view(spec, policy_fields(state), ended),
            "scored_kinds": sorted(kind.value for kind in record_of(spec).scored)}
