"""A turn taken over is asked again for every call not answered at the take, while the
dead coordinator's calls of it may still be queued ahead: a worker asks no agent whose
call of that phase has an answer by the time it takes the request."""

from __future__ import annotations

import time

from parley.shared.models import Answer, AnswerStatus, CallRequest
from parley.shared.store import RoomStore
from parley.workers.tasks import answered_before
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"
AGENTS = ["agent0", "agent1", "agent2", "agent3"]


def request(answers_from: str, phase: int = 0) -> CallRequest:
    return CallRequest(prefix="t", room=ROOM, turn=2, attempt=2, agents=AGENTS, phase=phase,
                       snapshot_seq=1, deadline=time.time() + 30, spec_version=1,
                       answers_from=answers_from)


def test_a_resumed_turns_worker_skips_the_calls_answered_since_the_turn_opened(store: RoomStore):
    store.create_room(ROOM, scripted_spec(rotating_scripts(4, 3)))
    store.write_answer(ROOM, Answer(agent="agent0", turn=1, score=0.9, attempt=1), 100)
    turn_opened = store.read_answers(ROOM)[-1][0]
    answers = [
        Answer(agent="agent0", turn=1, score=0.9, attempt=1),  # the turn before, late
        Answer(agent="agent1", turn=2, score=0.5, attempt=1),  # the dead coordinator's call
        Answer(agent="agent2", turn=2, status=AnswerStatus.TIMEOUT, attempt=1),
        Answer(agent="agent3", turn=2, phase=1, score=0.5, attempt=1),  # another phase
    ]
    store.write_answers(ROOM, answers, 100)

    assert answered_before(store, request(turn_opened)) == {"agent1"}
    assert answered_before(store, request(turn_opened, phase=1)) == {"agent3"}
    # A turn not taken over reads nothing: its coordinator asked each call once.
    assert answered_before(store, request("")) == set()
