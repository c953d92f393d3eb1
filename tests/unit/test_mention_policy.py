"""The mention policy, pure: every row of seed 003's "Who speaks next" table, owed-once,
no immediate repeat, silence, waiting, depth and turn limits, listen/talk, instruct and
regenerate."""

from __future__ import annotations

from typing import Any

from parley.coordinator.policies import decide, first_calls
from parley.coordinator.policies import mention as m
from parley.coordinator.policies.base import Calls, Decision, Posted, TurnView
from parley.shared.models import Answer, CallKind, RoomSpec, StopReason

AGENTS = ("investigator", "dev", "sre")


def spec(**policy: Any) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "mention", "everyone": list(AGENTS), **policy},
        "agents": [{"name": name, "model": "scripted", "script": []} for name in AGENTS]})


class Room:
    """A mention room played turn by turn on the pure policy."""

    def __init__(self, room_spec: RoomSpec) -> None:
        self.spec = room_spec
        self.floor: dict[str, str] = {}
        self.unread: list[Posted] = []
        self.seq = 0
        self.turn = 0
        self.posted: list[tuple[str, str]] = []

    def post(self, sender: str, content: str) -> None:
        self.seq += 1
        self.unread.append(Posted(self.seq, sender, content))

    def view(self) -> TurnView:
        return TurnView(turn=self.turn + 1, run=1, run_turns=2, messages_in_run=1,
                        recent=(), snapshot_seq=self.seq, floor_state=dict(self.floor),
                        unread=tuple(self.unread))

    def next(self) -> str | StopReason:
        """Who the next turn goes to, or why there is none (the run's end is kept)."""
        first = first_calls(self.spec, self.view())
        if isinstance(first, Decision):
            self.keep(first)
            assert first.stop is not None
            return first.stop
        assert first.kind is CallKind.DISCUSS
        return first.agents[0]

    def answer(self, text: str) -> Decision:
        """The turn's agent answers ``text``; the decision is committed."""
        first = first_calls(self.spec, self.view())
        assert isinstance(first, Calls)
        agent = first.agents[0]
        self.turn += 1
        decision = decide(self.spec, self.view(),
                          [Answer(agent=agent, turn=self.turn, kind=CallKind.DISCUSS, message=text)])
        self.keep(decision)
        if decision.winner:
            self.seq += 1  # the agent's message takes a seq; the policy reads it itself
            self.posted.append((decision.winner, decision.message))
        return decision

    def keep(self, decision: Decision) -> None:
        self.floor.update(decision.floor_state)
        self.unread = []

    @property
    def state(self) -> m.Floor:
        return m.Floor.read(self.floor)

    @property
    def planned(self) -> m.Floor:
        """The floor as the next turn reads it (unread messages applied)."""
        return m.plan(self.spec, self.view()).floor


def test_person_naming_agents_puts_them_in_front_in_order_named() -> None:
    room = Room(spec())
    room.post("oncall", "@sre @dev what changed?")
    assert room.next() == "sre"
    room.answer("nothing on my side")
    assert room.next() == "dev"


def test_person_naming_nobody_asks_everyone_in_its_order() -> None:
    room = Room(spec(everyone=["dev", "investigator"]))
    room.post("oncall", "checkout is down")
    assert room.state.queue == [] and room.next() == "dev"
    room.answer("looking")
    assert room.next() == "investigator"
    room.answer("logs show 500s")
    assert room.next() is StopReason.QUEUE_EMPTY


def test_person_naming_nobody_goes_to_the_agents_that_asked_them() -> None:
    room = Room(spec())
    room.post("oncall", "@dev status?")
    room.answer("@oncall which region?")
    assert room.next() is StopReason.WAITING_FOR_PERSON
    assert room.state.waiting and room.state.asked == [("dev", "oncall")]
    room.post("oncall", "eu-west")
    assert room.next() == "dev"
    assert room.planned.asked == []
    room.answer("thanks, rolling back eu-west")
    assert room.next() is StopReason.QUEUE_EMPTY


def test_person_naming_only_people_asks_nobody() -> None:
    room = Room(spec(people=["oncall", "alice"]))
    room.post("oncall", "@alice can you look?")
    assert room.next() is StopReason.QUEUE_EMPTY


def test_addressed_only_person_naming_nobody_asks_nobody() -> None:
    room = Room(spec(addressed_only=True))
    room.post("oncall", "talking to alice here")
    assert room.next() is StopReason.QUEUE_EMPTY


def test_agent_naming_agents_queues_them_at_the_back_after_its_turn() -> None:
    room = Room(spec())
    room.post("oncall", "@investigator @dev look")
    room.answer("@sre check the deploys")
    assert room.state.queue == ["dev", "sre"]
    assert room.next() == "dev"


def test_other_sender_names_queue_at_the_back() -> None:
    room = Room(spec(people=["oncall"]))
    room.post("oncall", "@dev @investigator look")
    room.post("alertbot", "@sre disk full")
    assert room.state.queue == [] and room.next() == "dev"
    assert room.planned.queue == ["dev", "investigator", "sre"]


def test_agent_named_several_times_is_owed_one_turn() -> None:
    room = Room(spec())
    room.post("oncall", "@investigator @dev go")
    room.answer("@sre please")
    room.answer("@sre and again @sre")
    assert room.state.queue == ["sre"]
    room.answer("done")
    assert room.next() is StopReason.QUEUE_EMPTY


def test_person_naming_a_queued_agent_moves_it_to_the_front_once() -> None:
    room = Room(spec())
    room.post("oncall", "@investigator @dev go")
    room.answer("@sre please")
    room.post("oncall", "@sre first")
    assert room.next() == "sre"
    assert room.state.queue.count("sre") == 1


def test_the_agent_that_just_spoke_does_not_take_the_next_turn() -> None:
    room = Room(spec())
    room.post("oncall", "@dev go")
    room.answer("@dev myself, and @sre")
    assert room.next() == "sre"


def test_the_agent_that_just_spoke_takes_it_when_nobody_else_can() -> None:
    room = Room(spec())
    room.post("oncall", "@dev go")
    room.answer("ok")
    room.post("oncall", "@dev again")
    assert room.next() == "dev"


def test_silence_is_recorded_not_posted_not_read() -> None:
    room = Room(spec())
    room.post("oncall", "@dev @sre anything?")
    for token in ("(silent)", "(SILENT).", "silent", "[silent]", "(Silent.)", "Silent.",
                  " {silent} ", "<Silent>."):
        assert m.is_silent(m.settings(room.spec), token)
    decision = room.answer("(Silent.)")
    assert decision.winner is None and decision.message == "" and decision.stop is None
    assert room.posted == []
    assert room.next() == "sre"
    for message in ("silent here", "(silent) ok", "(silent.) (silent)", "...", ""):
        assert not m.is_silent(m.settings(room.spec), message)


def test_failed_call_is_posted_as_a_note() -> None:
    room = Room(spec())
    room.post("oncall", "@dev go")
    first = first_calls(room.spec, room.view())
    assert isinstance(first, Calls)
    decision = decide(room.spec, room.view(), [
        Answer(agent="dev", turn=1, kind=CallKind.DISCUSS, status="error", error="boom @sre"),
        Answer(agent="x", turn=1, kind=CallKind.DISCUSS)])
    assert decision.message == "(dev could not respond: boom @sre)"
    assert m.Floor.read(decision.floor_state).queue == []


def test_wait_for_a_listening_agent_and_its_end() -> None:
    room = Room(spec())
    room.floor = m.listen(room.spec, room.state, "sre").fields()
    room.post("oncall", "@dev go")
    room.answer("@sre roll back?")
    assert room.next() is StopReason.WAITING_FOR_PERSON
    assert room.state.queue == ["sre"]
    room.floor = m.talk(room.spec, room.state, "sre").fields()
    assert not room.state.waiting
    assert room.next() == "sre"


def test_room_with_no_person_stays_idle_instead_of_waiting() -> None:
    room = Room(spec(people=None))
    room.floor = m.listen(room.spec, room.state, "sre").fields()
    room.floor = m.instruct(room.spec, room.state, "dev", "ask sre").fields()
    room.answer("@sre roll back?")
    assert room.next() is StopReason.QUEUE_EMPTY
    assert not room.state.waiting


def test_listening_agent_takes_one_turn_when_a_person_names_it() -> None:
    room = Room(spec())
    room.floor = m.listen(room.spec, room.state, "sre").fields()
    room.post("oncall", "@sre status?")
    assert room.next() == "sre"
    room.answer("fine")
    assert "sre" in room.state.listening
    room.post("oncall", "everyone?")
    assert room.state.queue == [] and room.next() == "investigator"
    assert "sre" not in room.state.queue


def test_max_depth_stops_keeps_the_agent_queued_and_waits() -> None:
    room = Room(spec(max_depth=2))
    room.post("oncall", "@dev go")
    room.answer("@sre you")
    room.answer("@investigator you")
    assert room.next() is StopReason.MAX_DEPTH
    assert room.state.queue == ["investigator"] and room.state.waiting
    assert room.state.depth_stopped
    room.post("oncall", "carry on")
    assert room.next() == "investigator"
    assert room.planned.depth == 0


def test_max_turns_ends_the_discussion() -> None:
    room = Room(spec(max_turns=2))
    room.post("oncall", "@dev @sre go")
    room.answer("a")
    decision = room.answer("@investigator b")
    assert decision.stop is StopReason.MAX_TURNS
    assert room.state.over and room.state.queue == []
    room.post("oncall", "@dev anyone?")
    assert room.next() is StopReason.MAX_TURNS
    assert room.state.queue == []


def test_instruct_queues_at_front_even_past_depth_and_for_last_speaker() -> None:
    room = Room(spec(max_depth=1))
    room.post("oncall", "@dev @sre go")
    room.answer("done")
    room.floor = m.instruct(room.spec, room.state, "dev", "summarise").fields()
    assert room.state.queue == ["dev", "sre"]
    assert room.next() == "dev"
    room.answer("summary")
    assert "dev" not in room.state.instructions


def test_regenerate_queues_the_agents_that_answered_the_last_person() -> None:
    room = Room(spec())
    room.post("oncall", "@dev @sre go")
    room.answer("a")
    room.answer("b")
    room.floor = m.regenerate(room.spec, room.state).fields()
    assert room.state.queue == ["dev", "sre"]


def test_messages_read_once_survive_runs() -> None:
    room = Room(spec())
    room.post("oncall", "@dev go")
    view = room.view()
    floor = m.plan(room.spec, view).floor
    again, _ = m.read_all(room.spec, floor, view.unread)
    assert again.queue == ["dev"]  # read_seq keeps a message from queueing twice


def test_queue_view_fields() -> None:
    view = m.queue_view(m.Floor(queue=["dev"], asked=[("dev", "oncall")], waiting=True), "sre")
    assert view == {"speaking": "sre", "queue": ["dev"], "listening": [],
                    "asked": [["dev", "oncall"]], "waiting": True, "over": False}


def dispatch_spec(**policy: Any) -> RoomSpec:
    return spec(dispatch={"model": "scripted", "script": [], "threshold": 0.5, "max_agents": 2}, **policy)


def turn_with(room: Room, dispatch_reply: str | None, status: str = "ok") -> Decision:
    """A turn whose classifier answers ``dispatch_reply`` (None: no call expected)."""
    first = first_calls(room.spec, room.view())
    answers: list[Answer] = []
    if dispatch_reply is not None:
        assert isinstance(first, Calls) and first.kind is CallKind.DISPATCH
        answers.append(Answer(agent="dispatch", turn=1, kind=CallKind.DISPATCH,
                           message=dispatch_reply, status=status, prompt_tokens=7))
    return decide(room.spec, room.view(), answers)


def test_dispatch_picks_the_likeliest_agents_above_the_threshold() -> None:
    room = Room(dispatch_spec())
    room.post("oncall", "customers write to support, what do they say?")
    decision = turn_with(room, '{"investigator": 0.6, "dev": 0.1, "sre": 0.9}')
    assert decision.next == Calls(CallKind.DISCUSS, ("sre",))
    floor = m.plan(room.spec, room.view(), [Answer(agent="dispatch", turn=1,
                   kind=CallKind.DISPATCH, message='{"investigator": 0.6, "sre": 0.9}')]).floor
    assert floor.queue == ["sre", "investigator"]
    assert floor.dispatched == {"seq": 1, "agents": ["sre", "investigator"],
                                "reason": "classifier"}


def test_dispatch_reads_name_probability_lines_and_caps_max_agents() -> None:
    room = Room(dispatch_spec())
    room.post("oncall", "what now")
    reply = "investigator: 0.7\ndev: 0.8\nsre: 0.95\nghost: 1.0"
    floor = m.plan(room.spec, room.view(), [Answer(agent="dispatch", turn=1,
                   kind=CallKind.DISPATCH, message=reply)]).floor
    assert floor.queue == ["sre", "dev"]


def test_dispatch_none_reaching_the_threshold_asks_nobody() -> None:
    room = Room(dispatch_spec())
    room.post("oncall", "thanks all")
    decision = turn_with(room, '{"investigator": 0.1, "dev": 0.2, "sre": 0.3}')
    assert decision.stop is StopReason.QUEUE_EMPTY
    assert [line.fields["reason"] for line in decision.log_lines] == ["none"]


def test_a_failing_classifier_falls_back_to_the_rule() -> None:
    room = Room(dispatch_spec())
    room.post("oncall", "@dev status?")
    room.answer("@oncall which region?")
    room.post("oncall", "eu-west")
    for reply, status in (("no idea", "ok"), ("", "error"), ("", "timeout")):
        decision = turn_with(room, reply, status)
        assert decision.next == Calls(CallKind.DISCUSS, ("dev",)), (reply, status)
        judged = m.plan(room.spec, room.view(), [Answer(agent="dispatch", turn=1, status=status,
                        kind=CallKind.DISPATCH, message=reply)])
        assert judged.dispatch.reason == "fallback"


def test_the_classifier_marks_the_askers_first_on_a_tie() -> None:
    room = Room(dispatch_spec())
    room.post("oncall", "@sre status?")
    room.answer("@oncall which region?")
    room.post("oncall", "eu-west")
    floor = m.plan(room.spec, room.view(), [Answer(agent="dispatch", turn=1,
                   kind=CallKind.DISPATCH, message='{"investigator": 0.7, "sre": 0.7}')]).floor
    assert floor.queue == ["sre", "investigator"]


def test_dispatch_never_judges_a_message_that_names_someone() -> None:
    room = Room(dispatch_spec())
    room.post("oncall", "@dev look")
    assert first_calls(room.spec, room.view()) == Calls(CallKind.DISCUSS, ("dev",))


def test_dispatch_and_addressed_only_are_exclusive() -> None:
    import pytest
    with pytest.raises(ValueError, match="addressed_only and dispatch are exclusive"):
        spec(addressed_only=True, dispatch={"model": "scripted", "script": []})


def test_spec_errors_name_the_wrong_field() -> None:
    import pytest
    with pytest.raises(ValueError, match="policy.everyone names 'ops'"):
        spec(everyone=["ops"])
    with pytest.raises(ValueError, match="policy.people names 'dev'"):
        spec(people=["dev"])


def test_a_discussions_turn_cap_is_bounded_like_every_count():
    from pydantic import ValidationError

    from parley.shared.models import MentionPolicy

    assert MentionPolicy(kind="mention", max_turns=1_000_000).max_turns == 1_000_000
    try:
        MentionPolicy(kind="mention", max_turns=1_000_001)
    except ValidationError as error:
        assert "max_turns" in str(error)
    else:
        raise AssertionError("a max_turns over 1,000,000 was accepted")
