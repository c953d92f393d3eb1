"""Every call stops at its deadline: a script's sleep, a stream's next chunk and a rate
limit's backoff end there (or, for a sleep or a backoff, at once when the worker shuts
down), so no call holds a worker's slot past its turn."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from parley.shared.models import AgentSpec, AnswerStatus, CallKind, ErrorKind
from parley.shared.settings import get_settings
from parley.workers import deadlines
from parley.workers.calls import Call, answer_call
from parley.workers.deadlines import DeadlinePassed, until_deadline

HOUR = 3600


@pytest.fixture
def shutting_down() -> Iterator[threading.Event]:
    """The worker's shutdown flag, cleared again after the test."""
    yield deadlines.STOPPING
    deadlines.STOPPING.clear()


def sleeper(**fields) -> AgentSpec:
    return AgentSpec(name="Sleeper", model="scripted",
                     script=[{"score": 0.9, "message": "at last", "sleep": HOUR}], **fields)


def timed_bid(agent: AgentSpec, deadline_s: float, kind: CallKind = CallKind.BID):
    started = time.monotonic()
    bid = answer_call(agent, [agent], Call(1, 1, kind, 0, 1), lambda: [], time.time() + deadline_s,
                   settings=get_settings())
    return bid, time.monotonic() - started


@pytest.mark.parametrize("kind", [CallKind.BID, CallKind.SPEAK])
def test_a_scripted_sleep_ends_at_the_deadline_as_a_timeout(kind):
    bid, took = timed_bid(sleeper(), 0.3, kind)

    assert 0.25 < took < 1.5
    assert (bid.status, bid.error_kind) == (AnswerStatus.TIMEOUT, ErrorKind.TIMEOUT)
    assert bid.error == "DeadlinePassed: the script's sleep of 3600s outlasted the call's deadline"


def test_a_scripted_sleep_ends_at_the_agents_timeout_when_that_comes_first():
    bid, took = timed_bid(sleeper(timeout_s=0.2), 30)

    assert took < 1.5
    assert bid.error_kind is ErrorKind.TIMEOUT


def test_a_scripted_sleep_shorter_than_the_time_left_is_slept_whole():
    agent = AgentSpec(name="A", model="scripted",
                      script=[{"score": 0.9, "message": "done", "sleep": 0.2}])
    bid, took = timed_bid(agent, 5)

    assert took >= 0.2
    assert (bid.status, bid.message) == (AnswerStatus.OK, "done")


def test_a_worker_shutting_down_wakes_a_sleeping_call_which_answers_at_once(shutting_down):
    agent = sleeper()
    result = []
    call = threading.Thread(target=lambda: result.append(timed_bid(agent, HOUR)))
    call.start()
    shutting_down.set()
    call.join(5)

    assert not call.is_alive()
    [(bid, took)] = result
    assert took < 5
    assert (bid.status, bid.message) == (AnswerStatus.OK, "at last")


def stalling(pieces: list[str], stalled: threading.Event) -> Iterator[str]:
    """A stream that hands on ``pieces``, then stalls until ``stalled`` is set."""
    yield from pieces
    stalled.wait(30)


def test_a_stream_that_stalls_is_given_up_at_the_deadline():
    stalled = threading.Event()
    got: list[str] = []
    started = time.monotonic()
    with pytest.raises(DeadlinePassed, match="still streaming at the deadline"):
        for piece in until_deadline(stalling(["a", "b"], stalled), time.time() + 0.3):
            got.append(piece)
    took = time.monotonic() - started
    stalled.set()

    assert got == ["a", "b"]
    assert 0.25 < took < 1.5


def test_a_stream_hands_on_every_item_and_its_error():
    def failing() -> Iterator[int]:
        yield 1
        raise ConnectionError("dropped")

    assert list(until_deadline(iter([1, 2, 3]), time.time() + 5)) == [1, 2, 3]
    got: list[int] = []
    with pytest.raises(ConnectionError, match="dropped"):
        got.extend(until_deadline(failing(), time.time() + 5))
    assert got == [1]
