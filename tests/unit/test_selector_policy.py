"""The selector policy, one rule per test (seed 002)."""

from __future__ import annotations

from dataclasses import replace

from parley.coordinator import policies
from parley.coordinator.policies import Calls, Decision, TurnView, selector
from parley.shared.models import Answer, AnswerStatus, CallKind, RoomSpec, StopReason

NAMES = ("planner", "local", "budget")
SELECTOR = "selector"


def spec(**policy: object) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "selector", "selector": {"model": "scripted", "script": []}, **policy},
        "agents": [{"name": name, "role": f"the {name}", "model": "scripted", "script": []}
                   for name in NAMES],
    })


def view(last: str | None = None, spoken: int = 0) -> TurnView:
    return TurnView(turn=3, run=1, run_turns=2, messages_in_run=1 + spoken,
                    recent=(last,) if last else (), snapshot_seq=1 + spoken,
                    policy_state={"spoken": str(spoken)} if spoken else {})


def select(text: str, phase: int = 0, status: AnswerStatus = AnswerStatus.OK) -> Answer:
    return Answer(agent=SELECTOR, turn=3, kind=CallKind.SELECT, phase=phase, message=text,
               status=status)


def speak(agent: str, text: str, phase: int = 1, status: AnswerStatus = AnswerStatus.OK,
          error: str = "") -> Answer:
    return Answer(agent=agent, turn=3, kind=CallKind.SPEAK, phase=phase, message=text,
               status=status, error=error)


def test_a_turn_starts_by_asking_the_selector():
    assert policies.first_calls(spec(), view()) == Calls(CallKind.SELECT, (SELECTOR,))


def test_a_valid_pick_asks_that_participant_to_speak():
    decision = policies.decide(spec(), view(), [select("budget")])
    assert decision.next == Calls(CallKind.SPEAK, ("budget",))


def test_the_reply_is_posted_under_the_participants_name():
    decision = policies.decide(spec(), view(), [select("budget"), speak("budget", "over by $200")])
    assert (decision.winner, decision.message, decision.next, decision.stop) == (
        "budget", "over by $200", None, None)
    assert decision.policy_state == {"spoken": "1"}


def test_a_pick_is_read_trimmed_unquoted_and_case_insensitively():
    for text in ("  Budget ", '"budget"', "**budget**", "`budget`", "budget.", "'BUDGET'."):
        decision = policies.decide(spec(), view(), [select(text)])
        assert decision.next == Calls(CallKind.SPEAK, ("budget",)), text


def test_an_unknown_name_asks_the_selector_once_more():
    decision = policies.decide(spec(), view(), [select("accountant")])
    assert decision.next == Calls(CallKind.SELECT, (SELECTOR,))


def test_a_second_invalid_pick_falls_back_to_the_next_participant_in_order():
    decision = policies.decide(spec(), view(last="local"),
                               [select("accountant"), select("nobody", phase=1)])
    assert decision.next == Calls(CallKind.SPEAK, ("budget",))


def test_the_rotation_starts_with_the_first_participant_when_nobody_spoke():
    decision = policies.decide(spec(), view(), [select("?"), select("?", phase=1)])
    assert decision.next == Calls(CallKind.SPEAK, ("planner",))


def test_the_rotation_wraps_around_and_never_picks_the_last_speaker():
    decision = policies.decide(spec(), view(last="budget"), [select("?"), select("?", phase=1)])
    assert decision.next == Calls(CallKind.SPEAK, ("planner",))


def test_a_valid_retry_is_used():
    decision = policies.decide(spec(), view(), [select("nobody"), select("local", phase=1)])
    assert decision.next == Calls(CallKind.SPEAK, ("local",))


def test_back_to_back_is_refused_and_retried():
    decision = policies.decide(spec(), view(last="planner"), [select("planner")])
    assert decision.next == Calls(CallKind.SELECT, (SELECTOR,))


def test_back_to_back_twice_falls_back_to_someone_else():
    decision = policies.decide(spec(), view(last="planner"),
                               [select("planner"), select("planner", phase=1)])
    assert decision.next == Calls(CallKind.SPEAK, ("local",))


def test_back_to_back_is_allowed_when_the_spec_says_so():
    decision = policies.decide(spec(allow_repeat=True), view(last="planner"), [select("planner")])
    assert decision.next == Calls(CallKind.SPEAK, ("planner",))


def test_a_failed_selector_call_counts_as_an_invalid_pick():
    decision = policies.decide(spec(), view(), [select("", status=AnswerStatus.ERROR)])
    assert decision.next == Calls(CallKind.SELECT, (SELECTOR,))


def test_selector_terminate_ends_the_run_without_a_post():
    decision = policies.decide(spec(), view(last="planner", spoken=3), [select("TERMINATE")])
    assert (decision.winner, decision.stop, decision.next) == (None, StopReason.TERMINATE, None)


def test_participant_terminate_is_posted_then_ends_the_run():
    decision = policies.decide(spec(), view(), [select("planner"),
                                                speak("planner", "Final plan. TERMINATE")])
    assert (decision.winner, decision.message) == ("planner", "Final plan. TERMINATE")
    assert decision.stop is StopReason.TERMINATE
    assert decision.answer == "Final plan."


def test_the_cap_ends_the_run_with_max_turns():
    decision = policies.decide(spec(max_turns=3), view(last="local", spoken=2),
                               [select("planner"), speak("planner", "plan")])
    assert decision.winner == "planner"
    assert decision.stop is StopReason.MAX_TURNS


def test_a_run_at_its_cap_does_not_open_another_turn():
    decision = policies.first_calls(spec(max_turns=2), view(spoken=2))
    assert isinstance(decision, Decision)
    assert decision.stop is StopReason.MAX_TURNS


def test_a_failed_reply_is_posted_as_a_note_and_counts_toward_the_cap():
    decision = policies.decide(spec(max_turns=1), view(), [
        select("local"), speak("local", "", status=AnswerStatus.ERROR, error="RateLimitError: slow")])
    assert decision.message == "(local could not respond: RateLimitError: slow)"
    assert decision.stop is StopReason.MAX_TURNS
    assert decision.answer is None


def test_a_reply_that_is_only_terminate_leaves_the_answer_unchanged():
    decision = policies.decide(spec(), view(), [select("planner"), speak("planner", "TERMINATE")])
    assert decision.stop is StopReason.TERMINATE
    assert decision.answer is None


def test_seed_002_stub_selector_order():
    """The seed's own test: the selector answers planner, budget, planner, TERMINATE;
    participants answer fixed text. They speak in exactly that order; 3 posts + the task."""
    picks = iter(["planner", "budget", "planner", "TERMINATE"])
    current = view()
    posted: list[str] = []
    room = spec()
    while True:
        calls = policies.first_calls(room, current)
        assert calls == Calls(CallKind.SELECT, (SELECTOR,))
        answers = [select(next(picks))]
        decision = policies.decide(room, current, answers)
        if decision.next is None:
            break
        answers.append(speak(decision.next.agents[0], "fixed text"))
        decision = policies.decide(room, current, answers)
        posted.append(decision.winner or "")
        current = replace(current, recent=decision.recent, policy_state=decision.policy_state)
    assert posted == ["planner", "budget", "planner"]
    assert decision.stop is StopReason.TERMINATE
    assert 1 + len(posted) == 4


def test_every_participant_name_appears_in_the_rotation():
    names = spec().agent_names
    seen = {selector.rotation(names, last) for last in (None, *names)}
    assert seen == set(names)


def test_terminate_must_be_the_last_word_in_capitals():
    assert selector.ends_with_terminate("Plan is final. TERMINATE")
    assert selector.ends_with_terminate("Done.\n\n**TERMINATE**")
    assert not selector.ends_with_terminate("We must EXTERMINATE")
    assert not selector.ends_with_terminate("then the contract can terminate")
    assert not selector.ends_with_terminate("TERMINATE only if the budget fits")


def test_a_pick_matches_a_name_as_names_are_told_apart_case_and_spacing_aside():
    room = RoomSpec.model_validate({
        "policy": {"kind": "selector", "selector": {"model": "scripted", "script": []}},
        "agents": [{"name": name, "model": "scripted", "script": []}
                   for name in ("Budget Checker", "planner ")]})
    for text, chosen in (("budget  checker", "Budget Checker"), ("Budget Checker.", "Budget Checker"),
                         ("planner", "planner "), ("**PLANNER**", "planner ")):
        decision = policies.decide(room, view(), [select(text)])
        assert decision.next == Calls(CallKind.SPEAK, (chosen,)), text


def test_an_empty_reply_is_posted_as_a_note_that_says_so():
    decision = policies.decide(spec(), view(), [select("local"), speak("local", "  ")])
    assert decision.message == "(local could not respond: an empty reply)"
