"""The order a room's events stream must keep against its log (shared/events.py)."""

from __future__ import annotations

from parley.coordinator.policies import POLICIES
from parley.shared.events import (
    AnswerArrived,
    Event,
    MessageChunk,
    MessageCommitted,
    RunEnded,
    RunStarted,
    TurnDecided,
    TurnOpened,
)
from parley.shared.models import Message

# The events a policy's watched fields write (a mention room's queue_changed, a handoff).
WATCHED_EVENTS = frozenset(policy.watched.event for policy in POLICIES.values()
                           if policy.watched is not None)


def check_event_order(events: list[Event], messages: list[Message],
                      answers_after_opening: bool = True) -> None:
    """Assert that ``events`` (the whole stream, nothing trimmed) tell the story of the log
    ``messages``: one message_committed per message, in seq order and with its sender, run
    and turn; each run's run_started before its first message and its run_ended after its
    last; each turn opened once, decided once after it opened (its message just before its
    decision, a watched event of its commit alone between them); each watched event (a
    queue_changed, a handoff) just before its commit's turn_decided or its end_run's
    run_ended; and, with
    ``answers_after_opening``, each answer after its turn opened. (A Redis restart that lost
    a turn's opening breaks that last rule: a worker's answer, written again once Redis is
    back, may land before the turn opens again.) Each message_chunk comes after its turn
    opened and before it was decided, its call's chunks numbered 0, 1, 2 .. (0 starting the
    text over), and a streamed message's committed content is what its chunks wrote (or
    the start of it, where the policy cut the reply; or the policy's note that the agent
    could not respond)."""
    committed = [e for e in events if isinstance(e, MessageCommitted)]
    assert [(e.seq, e.sender, e.run, e.turn) for e in committed] == [
        (m.seq, m.sender, m.run, m.turn) for m in messages]
    where = {id(event): index for index, event in enumerate(events)}
    for run in sorted({m.run for m in messages}):
        in_run = [where[id(e)] for e in committed if e.run == run]
        started = [where[id(e)] for e in events if isinstance(e, RunStarted) and e.run == run]
        assert len(started) == 1 and started[0] < in_run[0], (run, started, in_run)
        ended = [where[id(e)] for e in events if isinstance(e, RunEnded) and e.run == run]
        assert all(index > in_run[-1] for index in ended), (run, ended, in_run)
    opened = {e.turn: where[id(e)] for e in events if isinstance(e, TurnOpened)}
    assert len(opened) == sum(isinstance(e, TurnOpened) for e in events), "a turn opened twice"
    decided = {e.turn: where[id(e)] for e in events if isinstance(e, TurnDecided)}
    assert len(decided) == sum(isinstance(e, TurnDecided) for e in events), "a turn decided twice"
    for turn, index in decided.items():
        assert opened[turn] < index, turn
    for event in committed:
        if event.turn is not None:
            after = events[where[id(event)] + 1]
            if after.type in WATCHED_EVENTS:
                after = events[where[id(event)] + 2]
            assert isinstance(after, TurnDecided) and after.turn == event.turn, (event, after)
    for event in events:
        if event.type in WATCHED_EVENTS:
            after = events[where[id(event)] + 1]
            assert isinstance(after, TurnDecided | RunEnded) and str(after.run) == str(
                getattr(event, "run", None)), (event, after)
    for event in events:
        if answers_after_opening and isinstance(event, AnswerArrived):
            assert opened[event.turn] < where[id(event)], event
    check_chunks(events, messages, where, opened, decided)


def check_chunks(events: list[Event], messages: list[Message], where: dict[int, int],
                 opened: dict[int, int], decided: dict[int, int]) -> None:
    """The message_chunk rules of check_event_order. A call made again (a takeover's)
    streams again from index 0, maybe beside the first: its text is checked only when one
    stream wrote it."""
    calls: dict[tuple[int, int, str], list[MessageChunk]] = {}
    for event in events:
        if not isinstance(event, MessageChunk):
            continue
        assert opened[event.turn] < where[id(event)], event
        assert event.turn not in decided or where[id(event)] < decided[event.turn], event
        calls.setdefault((event.turn, event.phase, event.agent), []).append(event)
    texts = {}
    for (turn, _, agent), chunks in sorted(calls.items()):
        assert chunks[0].index == 0, chunks[0]
        if [chunk.index for chunk in chunks] == list(range(len(chunks))):
            texts[(turn, agent)] = "".join(chunk.text for chunk in chunks)  # its last phase's
        else:
            texts.pop((turn, agent), None)
    for message in messages:
        streamed = texts.get((message.turn or 0, message.sender))
        # A reply with nothing usable left (failed, or cut to nothing) is posted as a note.
        notice = message.content.startswith(f"({message.sender} could not respond: ")
        if streamed is not None and not notice:
            assert streamed.strip().startswith(message.content), (message, streamed)
