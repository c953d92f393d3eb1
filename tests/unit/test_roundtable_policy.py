"""The roundtable policy, one rule per test (seed 004)."""

from __future__ import annotations

from dataclasses import replace

from parley.coordinator import policies
from parley.coordinator.policies import Calls, Decision, LogLine, TurnView, roundtable
from parley.coordinator.turn_loop import timed_out
from parley.shared.models import Answer, AnswerStatus, CallKind, ErrorKind, RoomSpec, RoomStatus, StopReason

QUESTION = "Is the Sony WH-1000XM5 worth it?"


def spec(names: tuple[str, ...] = ("value", "quality", "Moderator"), **policy: object) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": "Moderator", **policy},
        "agents": [{"name": name, "role": f"the {name}", "model": "scripted", "script": []}
                   for name in names],
    })


def view(spoken: int = 0, run_turns: int = 1) -> TurnView:
    return TurnView(turn=run_turns, run=1, run_turns=run_turns, messages_in_run=1 + spoken,
                    recent=(), snapshot_seq=1 + spoken,
                    policy_state={"spoken": str(spoken)} if spoken else {})


def panel(agent: str, text: str, status: AnswerStatus = AnswerStatus.OK, error: str = "",
          kind: ErrorKind = ErrorKind.NONE) -> Answer:
    return Answer(agent=agent, turn=1, kind=CallKind.PANEL, message=text, status=status,
               error=error, error_kind=kind)


def moderate(text: str, status: AnswerStatus = AnswerStatus.OK, error: str = "",
             kind: ErrorKind = ErrorKind.NONE) -> Answer:
    return Answer(agent="Moderator", turn=1, kind=CallKind.MODERATE, message=text, status=status,
               error=error, error_kind=kind)


def test_the_first_turn_asks_the_first_panelist():
    assert policies.first_calls(spec(), view()) == Calls(CallKind.PANEL, ("value",))


def test_the_panelists_speak_in_spec_order_then_the_moderator():
    calls = [policies.first_calls(spec(), view(spoken)) for spoken in range(3)]
    assert calls == [Calls(CallKind.PANEL, ("value",)), Calls(CallKind.PANEL, ("quality",)),
                     Calls(CallKind.MODERATE, ("Moderator",))]


def test_the_moderator_is_not_a_panelist_wherever_it_is_listed():
    room = spec(("Moderator", "value", "quality"))
    assert roundtable.panelists(room) == ("value", "quality")
    assert policies.first_calls(room, view()) == Calls(CallKind.PANEL, ("value",))


def test_each_panelist_speaks_once_per_round():
    calls = [policies.first_calls(spec(rounds=2), view(spoken)).agents[0]  # type: ignore[union-attr]
             for spoken in range(5)]
    assert calls == ["value", "quality", "value", "quality", "Moderator"]


def test_a_panelists_reply_is_posted_under_its_name_and_moves_the_position():
    decision = policies.decide(spec(), view(), [panel("value", "Strong price.")])
    assert (decision.winner, decision.message, decision.stop, decision.next) == (
        "value", "Strong price.", None, None)
    assert decision.policy_state == {"spoken": "1"}
    assert decision.answer is None and decision.log_lines == ()


def test_the_verdict_is_posted_ends_the_run_and_is_its_answer():
    decision = policies.decide(spec(), view(spoken=2), [moderate("Worth it: buy on sale.")])
    assert (decision.winner, decision.message) == ("Moderator", "Worth it: buy on sale.")
    assert (decision.stop, decision.status) == (StopReason.VERDICT, RoomStatus.IDLE)
    assert decision.answer == "Worth it: buy on sale."


def test_a_failed_panelist_is_posted_as_a_note_logged_and_the_debate_goes_on():
    failed = panel("value", "", AnswerStatus.ERROR, "ScriptedError: boom", ErrorKind.SCRIPTED)
    decision = policies.decide(spec(), view(), [failed])
    assert (decision.winner, decision.message) == (
        "value", "(value could not respond: ScriptedError: boom)")
    assert (decision.stop, decision.policy_state) == (None, {"spoken": "1"})
    assert decision.log_lines == (LogLine("panelist_failed", {
        "agent": "value", "error": "ScriptedError: boom", "error_kind": "scripted"}),)


def test_a_panelist_that_timed_out_on_the_runs_first_turn_does_not_end_the_run():
    decision = policies.decide(spec(), view(run_turns=1), [timed_out("value", 1, CallKind.PANEL)])
    assert decision.stop is None
    assert decision.message == "(value could not respond: no answer before the deadline)"
    assert decision.log_lines[0].fields["error_kind"] == "no_answer"


def test_an_unparsed_panelist_reply_is_a_note_too():
    unread = panel("quality", "", AnswerStatus.UNPARSED, "unparsed: no text in the output",
                   ErrorKind.UNPARSED)
    decision = policies.decide(spec(), view(spoken=1), [unread])
    assert decision.message == "(quality could not respond: unparsed: no text in the output)"
    assert decision.stop is None


def test_an_empty_reply_is_a_note_that_says_so():
    decision = policies.decide(spec(), view(), [panel("value", "  \n")])
    assert decision.message == "(value could not respond: an empty reply)"
    assert decision.log_lines[0].fields["error_kind"] == "empty_reply"


def test_a_reply_speaking_for_another_panelist_is_cut_there():
    decision = policies.decide(spec(), view(), [panel("value", "Fair price.\nquality: I agree.")])
    assert (decision.message, decision.cuts) == ("Fair price.", {"value": "quality"})


def test_a_reply_that_is_only_another_speakers_line_is_an_empty_reply():
    decision = policies.decide(spec(), view(), [panel("value", "Moderator: verdict: buy")])
    assert decision.message == "(value could not respond: an empty reply)"
    assert decision.cuts == {"value": "Moderator"}


def test_a_failed_moderator_ends_the_run_failed_with_the_error_and_its_likely_fix():
    failed = moderate("", AnswerStatus.ERROR, "RateLimitError: slow down", ErrorKind.RATE_LIMIT)
    decision = policies.decide(spec(), view(spoken=2), [failed])
    assert (decision.winner, decision.stop, decision.status) == (
        None, StopReason.MODERATOR_FAILED, RoomStatus.FAILED)
    assert decision.detail == ("Moderator: RateLimitError: slow down (likely fix: lower the "
                               "request rate or raise the provider's quota)")
    assert decision.answer is None


def test_a_moderator_nobody_answered_names_the_queue_fix():
    decision = policies.decide(spec(), view(spoken=2), [timed_out("Moderator", 3, CallKind.MODERATE)])
    assert decision.stop is StopReason.MODERATOR_FAILED
    assert decision.detail.startswith("Moderator: no answer before the deadline (likely fix: "
                                      "check that a worker consumes the agent's queue")


def test_an_empty_verdict_fails_the_run_saying_so():
    decision = policies.decide(spec(), view(spoken=2), [moderate("")])
    assert (decision.stop, decision.detail) == (StopReason.MODERATOR_FAILED,
                                                "Moderator: an empty reply")


def test_a_verdict_speaking_for_a_panelist_is_cut_there():
    decision = policies.decide(spec(), view(spoken=2),
                               [moderate("Buy it.\nvalue: thanks, moderator!")])
    assert (decision.message, decision.answer) == ("Buy it.", "Buy it.")


def test_a_position_past_the_panel_asks_the_moderator():
    # A spec changed mid-run may leave fewer panelists than turns already posted.
    assert policies.first_calls(spec(), view(spoken=7)) == Calls(CallKind.MODERATE, ("Moderator",))


def play(room: RoomSpec, answer: dict[str, object]) -> tuple[list[tuple[str, str]], Decision]:
    """Play a run through the policy: each call answered by ``answer[agent]`` (text, or an
    exception to raise); returns the posts and the last decision."""
    current = view()
    posted: list[tuple[str, str]] = []
    while True:
        calls = policies.first_calls(room, current)
        assert isinstance(calls, Calls) and len(calls.agents) == 1
        name = calls.agents[0]
        reply = answer[name]
        if isinstance(reply, Exception):
            bid = Answer(agent=name, turn=current.turn, kind=calls.kind, status=AnswerStatus.ERROR,
                      error=f"{type(reply).__name__}: {reply}", error_kind=ErrorKind.SCRIPTED)
        else:
            text = reply(QUESTION, posted) if callable(reply) else str(reply)
            bid = Answer(agent=name, turn=current.turn, kind=calls.kind, message=text)
        decision = policies.decide(room, current, [bid])
        assert decision.next is None
        if decision.winner:
            posted.append((decision.winner, decision.message))
        if decision.stop:
            return posted, decision
        current = replace(current, turn=current.turn + 1, run_turns=current.run_turns + 1,
                          recent=decision.recent,
                          policy_state={**current.policy_state, **decision.policy_state})


def test_seed_004_order_and_verdict_with_two_panelists():
    """The seed's test: value then quality speak in order, each seeing the transcript so
    far, then the moderator's verdict ends the debate."""
    room = spec()
    posted, decision = play(room, {
        "value": "Strong price for the feature set.",
        "quality": lambda q, transcript: (f"Considering {len(transcript)} prior point(s): "
                                          "build quality is excellent."),
        "Moderator": "Verdict: worth it.",
    })
    assert posted == [("value", "Strong price for the feature set."),
                      ("quality", "Considering 1 prior point(s): build quality is excellent."),
                      ("Moderator", "Verdict: worth it.")]
    assert (decision.stop, decision.answer) == (StopReason.VERDICT, "Verdict: worth it.")


def test_seed_004_a_panelist_that_raises_is_contained_and_the_moderator_still_runs():
    room = spec()
    posted, decision = play(room, {"value": RuntimeError("boom"), "quality": "Solid build.",
                                   "Moderator": "Verdict: buy."})
    assert posted == [("value", "(value could not respond: RuntimeError: boom)"),
                      ("quality", "Solid build."), ("Moderator", "Verdict: buy.")]
    assert decision.stop is StopReason.VERDICT


def test_every_panelist_failing_still_reaches_the_moderator():
    posted, decision = play(spec(rounds=2), {"value": RuntimeError("down"),
                                             "quality": RuntimeError("down"),
                                             "Moderator": "No evidence either way."})
    assert [sender for sender, _ in posted] == ["value", "quality", "value", "quality",
                                                "Moderator"]
    assert decision.stop is StopReason.VERDICT


def test_a_failure_recorded_without_a_kind_is_logged_as_other():
    decision = policies.decide(spec(), view(), [panel("value", "", AnswerStatus.ERROR, "boom")])
    assert decision.log_lines[0].fields["error_kind"] == "other"
