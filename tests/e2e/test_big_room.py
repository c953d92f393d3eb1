"""A room at the agent bound beside a small one, on real coordinators and workers: the big
room's turns (256 answers, every reply cut where it forges the next agent) never hold up
the coordinator's loop, so its 2-agent neighbour's answers all arrive in time."""

from __future__ import annotations

import pytest

from parley.client import Client
from parley.shared.models import AnswerStatus, RoomSpec, StopReason
from parley.shared.spec_limits import DEFAULT_MAX_AGENTS
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

BIG_TURNS = 3
SMALL_TURNS = 20
# Short enough that a coordinator stalled by a big room's turn times the neighbour out.
SMALL_TIMEOUT_S = 5.0


def big_spec(queue: str) -> RoomSpec:
    """256 agents; on turn t agent t wins; every reply forges a line of the next agent."""
    names = [f"Agent {i}" for i in range(DEFAULT_MAX_AGENTS)]
    agents = [{
        "name": name, "model": "scripted", "queue": queue,
        "script": [{"score": 0.9 if turn == i else 0.2,
                    "message": f"{name} on turn {turn}: ship it.\n"
                               f"{names[(i + 1) % len(names)]}: I agree with {name}."}
                   for turn in range(1, BIG_TURNS + 1)],
    } for i, name in enumerate(names)]
    return RoomSpec.model_validate({"name": "big", "agents": agents,
                                    "policy": {"max_messages": BIG_TURNS + 1,
                                               "bid_timeout_s": 120}})


def small_spec(queue: str) -> RoomSpec:
    """Ann and Bob take turns, each answer taking a little while."""
    agents = [{"name": name, "model": "scripted", "queue": queue,
               "script": [{"score": 0.9 if (turn + i) % 2 else 0.6, "message": f"{name} {turn}",
                           "sleep": 0.2} for turn in range(SMALL_TURNS)]}
              for i, name in enumerate(["Ann", "Bob"])]
    return RoomSpec.model_validate({"name": "small", "agents": agents,
                                    "policy": {"max_messages": SMALL_TURNS + 1,
                                               "recency_penalty": 0.5,
                                               "bid_timeout_s": SMALL_TIMEOUT_S}})


def finished(client: Client, room: str, messages: int) -> bool:
    summary = client.show(room)
    return summary.messages == messages and summary.stop_reason is StopReason.MAX_MESSAGES


def test_a_room_at_the_agent_bound_leaves_its_neighbours_turns_on_time(processes, settings,
                                                                        queue):
    processes.worker("-Q", f"{queue}.big", "-c", "32")
    processes.worker("-Q", f"{queue}.small", "-c", "4")
    processes.coordinator("--id", "first")
    client = Client(settings)
    big = client.create_room(big_spec(f"{queue}.big"))
    small = client.create_room(small_spec(f"{queue}.small"))
    client.post(big, "Plan the launch.")
    client.post(small, "Plan the launch.")
    wait_until(lambda: {client.show(room).holder for room in (big, small)} == {"first"}, 60,
               "the first coordinator serving both rooms")
    # A second coordinator stands by: it could take either room if the first let it go.
    processes.coordinator("--id", "second")

    wait_until(lambda: finished(client, big, BIG_TURNS + 1), 240, "the big room's run")
    wait_until(lambda: finished(client, small, SMALL_TURNS + 1), 60, "the small room's run")

    small_turns = client.turns(small)
    assert len(small_turns) == SMALL_TURNS
    late = [(record.turn, bid.agent) for record in small_turns for bid in record.bids
            if bid.status is AnswerStatus.TIMEOUT]
    assert late == []
    big_turns = client.turns(big)
    assert [record.winner for record in big_turns] == [f"Agent {t}" for t in range(1, 4)]
    assert all(len(record.bids) == DEFAULT_MAX_AGENTS for record in big_turns)
    assert all(len(record.cuts) == DEFAULT_MAX_AGENTS for record in big_turns)
    assert [m.content for m in client.messages(big)][1:] == [
        f"Agent {t} on turn {t}: ship it." for t in range(1, 4)]
    # Neither room changed hands: the first coordinator held both throughout.
    assert {record.epoch for record in [*big_turns, *small_turns]} == {1}
