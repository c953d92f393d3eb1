"""The Prometheus metrics: each update from the fact it is counted from, and a room served on
fakeredis moving the coordinator's counters by what its turn records hold."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from prometheus_client import REGISTRY

from parley.coordinator.lease import Leases
from parley.coordinator.room_io import RoomIO
from parley.coordinator.service import Coordinator
from parley.shared import metrics
from parley.shared.keys import Keys
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    ErrorKind,
    ToolCallRecord,
    ToolCallStatus,
    TurnRecord,
)
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from parley.workers.tools.loop import ended
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"
# The label of rooms created without an organization.
ORG = {"organization": "default"}


def sample(name: str, **labels: str) -> float:
    """The metric sample's value now (0 when it was never set)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """Samples before and after a block: ``delta(name, **labels)`` is what it added."""

    def __init__(self, *names: tuple[str, dict[str, str]]) -> None:
        self.before = {(name, tuple(sorted(labels.items()))): sample(name, **labels)
                       for name, labels in names}

    def __call__(self, name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return sample(name, **labels) - self.before.get(key, 0.0)


def answer(agent: str, phase: int = 0, latency_ms: float = 0.0, **fields) -> Answer:
    return Answer(agent=agent, turn=1, phase=phase, latency_ms=latency_ms, **fields)


def record(bids: list[Answer], seconds: float) -> TurnRecord:
    return TurnRecord(turn=1, run=1, run_turns=1, epoch=1, snapshot_seq=1, messages_in_run=1,
                      recent=[], bids=bids, opened_at=100.0, decided_at=100.0 + seconds)


def test_added_latency_is_the_turn_less_the_slowest_answer_of_each_phase():
    bids = [answer("a", 0, 300.0), answer("b", 0, 500.0), answer("c", 1, 1000.0)]

    assert metrics.added_seconds(record(bids, 1.52)) == pytest.approx(0.02)


def test_a_turn_with_a_timeout_has_no_added_latency():
    bids = [answer("a", 0, 300.0), answer("b", status=AnswerStatus.TIMEOUT,
                                          error_kind=ErrorKind.NO_ANSWER)]

    assert metrics.added_seconds(record(bids, 30.0)) is None


def test_a_committed_turn_counts_its_answers_timeouts_and_failures():
    bids = [answer("a", latency_ms=10.0),
            answer("b", status=AnswerStatus.ERROR, error_kind=ErrorKind.RATE_LIMIT),
            answer("c", status=AnswerStatus.TIMEOUT, error_kind=ErrorKind.NO_ANSWER)]
    delta = Delta(("parley_turns_total", ORG), ("parley_timeouts_total", ORG),
                  ("parley_answers_total", {**ORG, "kind": "bid", "status": "ok"}),
                  ("parley_answers_total", {**ORG, "kind": "bid", "status": "error"}),
                  ("parley_answers_total", {**ORG, "kind": "bid", "status": "timeout"}),
                  ("parley_failures_total", {**ORG, "kind": "rate_limit"}),
                  ("parley_failures_total", {**ORG, "kind": "no_answer"}),
                  ("parley_turn_seconds_count", ORG), ("parley_turn_seconds_sum", ORG),
                  ("parley_turn_added_seconds_count", ORG))

    metrics.observe_turn(record(bids, 2.0))

    assert delta("parley_turns_total", organization="default") == 1
    assert delta("parley_turn_seconds_count", **ORG) == 1
    assert delta("parley_turn_seconds_sum", **ORG) == pytest.approx(2.0)
    assert delta("parley_turn_added_seconds_count", **ORG) == 0  # it waited for a timeout
    assert delta("parley_timeouts_total", **ORG) == 1
    for status in ("ok", "error", "timeout"):
        assert delta("parley_answers_total", **ORG, kind="bid", status=status) == 1
    assert delta("parley_failures_total", **ORG, kind="rate_limit") == 1
    assert delta("parley_failures_total", **ORG, kind="no_answer") == 1


def test_a_written_answer_counts_its_tokens_and_cost_by_model():
    model = "openai/test-metrics-model"
    org = {"organization": "acme"}
    delta = Delta(("parley_tokens_total", {**org, "model": model, "direction": "prompt"}),
                  ("parley_tokens_total", {**org, "model": model, "direction": "completion"}),
                  ("parley_cost_usd_total", {**org, "model": model}),
                  ("parley_answers_total", {**org, "kind": "speak", "status": "ok"}))

    metrics.observe_answer(answer("a", kind=CallKind.SPEAK, prompt_tokens=120,
                                  completion_tokens=30, cost_usd=0.002), model, "acme")

    assert delta("parley_tokens_total", **org, model=model, direction="prompt") == 120
    assert delta("parley_tokens_total", **org, model=model, direction="completion") == 30
    assert delta("parley_cost_usd_total", **org, model=model) == pytest.approx(0.002)
    assert delta("parley_answers_total", **org, kind="speak", status="ok") == 1


def test_models_past_the_label_limit_are_counted_as_other(monkeypatch):
    monkeypatch.setattr(metrics, "_models", {f"m{i}" for i in range(metrics.MOST_MODELS)})

    assert metrics.model_label("m7") == "m7"
    assert metrics.model_label("one-more") == metrics.OTHER_MODEL


def test_a_served_room_counts_each_recorded_turn_and_answer(sync_redis, async_redis):
    keys = Keys("t")
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 4)))
    store.post(ROOM, "User", "go")
    delta = Delta(("parley_turns_total", {"organization": "default"}),
                  ("parley_answers_total", {**ORG, "kind": "bid", "status": "ok"}),
                  ("parley_turn_added_seconds_count", ORG))

    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    turns = store.read_turns(ROOM)
    statuses = Counter(bid.status for turn in turns for bid in turn.bids)
    assert delta("parley_turns_total", organization="default") == len(turns) == 5
    assert delta("parley_answers_total", **ORG, kind="bid", status="ok") == statuses[AnswerStatus.OK]
    assert delta("parley_turn_added_seconds_count", **ORG) == len(turns)


def test_a_resumed_turn_counts_as_a_takeover(sync_redis, async_redis):
    keys = Keys("t")
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    store.post(ROOM, "User", "go")
    delta = Delta(("parley_takeovers_total", {}))

    async def open_and_die() -> None:
        scripts = Scripts(async_redis)
        io, leases = RoomIO(async_redis, keys, scripts), Leases(async_redis, keys, scripts,
                                                               "dead", 5.0)
        lease = await leases.acquire(ROOM)
        await io.drain_inbox(lease)
        await io.open_turn(lease, 30)
        sync_redis.delete(keys.lease(ROOM))

    asyncio.run(open_and_die())
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys), "c2"))

    assert delta("parley_takeovers_total") == 1


class StealingTransport(LocalWorkerTransport):
    """Answers, then lets another coordinator take the room's lease."""

    def send(self, requests) -> None:
        super().send(requests)
        self.store.redis.set(self.store.keys.lease(ROOM), "thief:9")


def test_a_coordinator_counts_the_rooms_it_holds_and_a_room_fenced_out_as_a_lost_lease(
        sync_redis, async_redis):
    keys = Keys("t")
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 3)))
    store.post(ROOM, "User", "go")
    coordinator = Coordinator(Settings(key_prefix="t"), StealingTransport(sync_redis, keys),
                              "c-metrics", client=async_redis)
    delta = Delta(("parley_lease_losses_total", {}))

    async def serve_until_fenced_out() -> float:
        await coordinator.scan()
        held = sample("parley_rooms_held", coordinator="c-metrics")
        _, task = coordinator.rooms[ROOM]
        await asyncio.wait_for(task, 10)
        return held

    assert asyncio.run(serve_until_fenced_out()) == 1
    assert delta("parley_lease_losses_total") == 1
    assert sample("parley_rooms_held", coordinator="c-metrics") == 0


def test_each_lease_renewed_is_counted(sync_redis, async_redis):
    keys = Keys("t")
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=30))
    store.post(ROOM, "User", "go")
    coordinator = Coordinator(Settings(key_prefix="t"), LocalWorkerTransport(
        sync_redis, keys, answering=set()), "c-renew", client=async_redis)
    delta = Delta(("parley_lease_renewals_total", {}))

    async def hold_and_renew() -> None:
        await coordinator.scan()
        await coordinator.keeper.renew_held(coordinator.leases)
        for _, task in coordinator.rooms.values():
            task.cancel()

    asyncio.run(hold_and_renew())

    assert delta("parley_lease_renewals_total") == 1


def test_a_rooms_calls_and_tool_calls_are_counted_under_its_organization():
    acme = {"organization": "acme"}
    delta = Delta(("parley_turns_total", acme), ("parley_timeouts_total", acme),
                  ("parley_answers_total", {**acme, "kind": "bid", "status": "timeout"}),
                  ("parley_failures_total", {**acme, "kind": "no_answer"}),
                  ("parley_turn_seconds_count", acme),
                  ("parley_tool_calls_total", {**acme, "tool": "lookup", "status": "ok"}),
                  ("parley_tool_seconds_count", {**acme, "tool": "lookup"}),
                  ("parley_answers_total", {**ORG, "kind": "bid", "status": "timeout"}))
    timed_out = answer("a", status=AnswerStatus.TIMEOUT, error_kind=ErrorKind.NO_ANSWER)

    metrics.observe_turn(record([timed_out], 2.0), "acme")
    ended(ToolCallRecord(id="1.0.1.0.0", agent="a", tool="lookup"), ToolCallStatus.OK, "found",
          12.0, "acme")

    assert delta("parley_turns_total", **acme) == 1
    assert delta("parley_timeouts_total", **acme) == 1
    assert delta("parley_answers_total", **acme, kind="bid", status="timeout") == 1
    assert delta("parley_failures_total", **acme, kind="no_answer") == 1
    assert delta("parley_turn_seconds_count", **acme) == 1
    assert delta("parley_tool_calls_total", **acme, tool="lookup", status="ok") == 1
    assert delta("parley_tool_seconds_count", **acme, tool="lookup") == 1
    assert delta("parley_answers_total", **ORG, kind="bid", status="timeout") == 0
