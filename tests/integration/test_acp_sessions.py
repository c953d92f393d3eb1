"""ACP sessions against the test agent's real process (tests/support/acp_agent.py): one per
(room, agent), kept across turns, closed when idle or when its room is gone, started anew
when its process died, at most max_sessions per profile."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.shared.models import Message, RoomSpec
from parley.workers.acp.config import AcpConfig, AcpProfile
from parley.workers.acp.sessions import AcpSessionError, AcpSessions, TurnHandlers
from parley.workers.acp.turns import AcpTurn, run_turn_once_more
from tests.support.polling import wait_until

AGENT = Path(__file__).parents[1] / "support" / "acp_agent.py"
GONE: set[str] = set()


@pytest.fixture
def sessions(tmp_path) -> Iterator[AcpSessions]:
    profile = AcpProfile(command=[sys.executable, str(AGENT)], cwd=str(tmp_path), max_sessions=2,
                         env={"PYTHONPATH": str(Path(__file__).parents[2])})
    held = AcpSessions(AcpConfig(agents={"dev": profile}), idle_s=1.0,
                       room_gone=lambda key: key[1] in GONE)
    yield held
    held.close_all()


def turn(sessions: AcpSessions, room: str, text: str = "The message you answer: hi") -> str:
    session = sessions.take(("p", room, "dev"), "dev", time.time() + 20)
    written: list[str] = []
    try:
        sessions.prompt(session, text, TurnHandlers(written.append, lambda u: None,
                                                    lambda t: False), lambda: time.time() + 20)
    finally:
        sessions.give_back(session)
    return "".join(written).split()[1]  # the session id


def test_a_session_is_kept_across_turns_and_closed_when_idle(sessions):
    first = turn(sessions, "r1")
    assert turn(sessions, "r1") == first
    wait_until(lambda: not sessions.sessions, 10, "the idle session to close")
    assert turn(sessions, "r1") != first


def test_a_session_of_a_deleted_room_is_closed(sessions):
    sessions.idle_s = 600
    turn(sessions, "r2")
    GONE.add("r2")
    wait_until(lambda: not sessions.sessions, 10, "the deleted room's session to close")


def test_a_session_whose_process_died_starts_again(sessions):
    sessions.idle_s = 600
    first = turn(sessions, "r3")
    os.kill(sessions.sessions[("p", "r3", "dev")].process.pid, signal.SIGKILL)
    wait_until(lambda: not sessions.sessions[("p", "r3", "dev")].alive, 10, "the process to die")
    assert turn(sessions, "r3") != first


def test_a_profile_holds_at_most_max_sessions(sessions):
    sessions.idle_s = 600
    for room in ("a", "b", "c"):
        turn(sessions, room)
    assert sorted(key[1] for key in sessions.sessions) == ["b", "c"]
    busy = [sessions.take(("p", room, "dev"), "dev", time.time() + 20) for room in ("b", "c")]
    with pytest.raises(AcpSessionError, match="holds its max_sessions"):
        sessions.take(("p", "d", "dev"), "dev", time.time() + 20)
    for session in busy:
        sessions.give_back(session)


def test_a_turn_whose_process_died_midway_is_asked_once_more_of_a_new_session(
        sessions, store, tmp_path):
    spec = RoomSpec.model_validate({"policy": {"kind": "mention"}, "agents": [
        {"name": "lead", "model": "scripted", "script": []}, {"name": "dev", "model": "acp/dev"}]})
    store.create_room("r5", spec)
    transcript = [Message(seq=1, sender="alice", content="hello", turn=0, run=1, epoch=1, ts=0),
                  Message(seq=2, sender="alice", content="@dev die", turn=0, run=1, epoch=1, ts=0)]
    turn = AcpTurn("dev", "1.0.1", time.time() + 30, None, lambda record: None)

    text, _ = run_turn_once_more(sessions, store, store.keys.prefix, "r5", spec,
                                 spec.agent("dev"), turn, transcript, "", 20)

    assert (tmp_path / "died").exists() and text.endswith("prompt 1: done.")
    # The new session read the room's history first.
    last = (tmp_path / "prompts.log").read_text().rsplit("--- session", 1)[1]
    assert "[1] alice: hello" in last


def test_a_prompt_past_its_deadline_ends_before_its_session_takes_the_next(sessions):
    key = ("p", "r6", "dev")
    session = sessions.take(key, "dev", time.time() + 20)
    written: list[str] = []
    handlers = TurnHandlers(written.append, lambda u: None, lambda t: False)
    deadline = time.time() + 1.0
    with pytest.raises(TimeoutError):
        sessions.prompt(session, "The message you answer: stall", handlers, lambda: deadline)
    sessions.give_back(session)
    first, written[:] = "".join(written), []

    again = sessions.take(key, "dev", time.time() + 20)
    sessions.prompt(again, "The message you answer: stall", handlers, lambda: time.time() + 20)
    sessions.give_back(again)

    # What the agent wrote while it stopped reached neither turn.
    assert again is session and "working" in first and "wrapping up" not in first
    assert "".join(written).endswith("prompt 2: done.") and "wrapping up" not in "".join(written)


def test_a_failed_turns_session_waits_for_its_answer_to_be_written(sessions):
    key = ("p", "r7", "dev")
    session = sessions.take(key, "dev", time.time() + 20)
    sessions.give_back(session, failed=True)
    with pytest.raises(AcpSessionError, match="is in a turn"):
        sessions.take(key, "dev", time.time() + 0.2)
    sessions.answered(key)
    assert sessions.take(key, "dev", time.time() + 20) is session
    sessions.give_back(session)
