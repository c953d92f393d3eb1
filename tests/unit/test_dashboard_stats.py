"""The dashboard's figures: Gini, floor share, usage over turns, failures, lease ages."""

from __future__ import annotations

import pytest

from parley.api.dashboard import (
    agent_cards,
    failures,
    floor_share,
    gini,
    lease_age,
    policy_state_view,
    policy_view,
    usage_series,
)
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    ErrorKind,
    Message,
    RoomSpec,
    StopReason,
    TurnRecord,
    Usage,
)
from parley.views.explain import is_silent_answer


def agent_message(seq: int, sender: str) -> Message:
    return Message(seq=seq, sender=sender, content="x", turn=seq, run=1)


def post(seq: int, sender: str) -> Message:
    return Message(seq=seq, sender=sender, content="x", run=1)


def record(turn: int, bids: list[Answer], decided_at: float = 0.0) -> TurnRecord:
    return TurnRecord(turn=turn, run=1, run_turns=turn, epoch=1, snapshot_seq=turn,
                      messages_in_run=turn, recent=[], bids=bids, decided_at=decided_at)


def test_gini_of_equal_values_is_zero() -> None:
    assert gini([3, 3, 3]) == 0.0


def test_gini_of_one_holder_among_n_is_n_minus_one_over_n() -> None:
    assert gini([0, 0, 0, 8]) == pytest.approx(0.75)


def test_gini_of_nothing_is_zero() -> None:
    assert gini([]) == 0.0
    assert gini([0, 0]) == 0.0


def test_gini_matches_the_mean_absolute_difference() -> None:
    values = [1, 2, 7]
    pairs = sum(abs(a - b) for a in values for b in values)
    assert gini(values) == pytest.approx(pairs / (2 * len(values) ** 2 * (sum(values) / 3)))


def test_floor_share_counts_agent_messages_not_posts_and_lists_silent_agents() -> None:
    messages = [post(1, "user"), agent_message(2, "a"), agent_message(3, "b"),
                agent_message(4, "a"), post(5, "a")]
    floor = floor_share(messages, ["a", "b", "c"])
    assert floor["total"] == 3
    assert floor["agents"] == [{"agent": "a", "messages": 2, "share": pytest.approx(2 / 3)},
                               {"agent": "b", "messages": 1, "share": pytest.approx(1 / 3)},
                               {"agent": "c", "messages": 0, "share": 0.0}]
    assert floor["gini"] == pytest.approx(gini([2, 1, 0]))


def test_floor_share_of_a_room_nobody_spoke_in_is_all_zero() -> None:
    floor = floor_share([post(1, "user")], ["a", "b"])
    assert floor["total"] == 0
    assert [row["share"] for row in floor["agents"]] == [0.0, 0.0]
    assert floor["gini"] == 0.0


def test_usage_series_is_cumulative_and_ends_at_the_room_totals() -> None:
    records = [record(1, [Answer(agent="a", turn=1, prompt_tokens=10, completion_tokens=2,
                              cost_usd=0.01),
                          Answer(agent="b", turn=1, prompt_tokens=5, cost_usd=0.005)], 100.0),
               record(2, [Answer(agent="a", turn=2, prompt_tokens=20, completion_tokens=4,
                              cost_usd=0.02)], 101.0)]
    # 7 prompt tokens were spent on a turn no record has (cancelled, or trimmed away).
    totals = Usage(prompt_tokens=42, completion_tokens=6, cost_usd=0.035)
    points = usage_series(records, totals)
    assert [(p["turn"], p["ts"]) for p in points] == [(1, 100.0), (2, 101.0)]
    assert [p["prompt_tokens"] for p in points] == [22, 42]
    assert [p["completion_tokens"] for p in points] == [2, 6]
    assert points[-1]["cost_usd"] == pytest.approx(0.035)


def test_usage_series_never_starts_below_zero() -> None:
    records = [record(1, [Answer(agent="a", turn=1, prompt_tokens=10)])]
    assert usage_series(records, Usage())[0]["prompt_tokens"] == 10


def test_failures_lists_failed_calls_newest_first_with_their_kinds() -> None:
    records = [record(1, [Answer(agent="a", turn=1),
                          Answer(agent="b", turn=1, status=AnswerStatus.ERROR,
                              error_kind=ErrorKind.SCRIPTED, error="provider down")]),
               record(2, [Answer(agent="c", turn=2, status=AnswerStatus.TIMEOUT,
                              error_kind=ErrorKind.NO_ANSWER)])]
    rows = failures(records)
    assert [(r["turn"], r["agent"], r["status"], r["error_kind"]) for r in rows] == [
        (2, "c", "timeout", "no_answer"), (1, "b", "error", "scripted")]
    assert rows[1]["error"] == "provider down"
    assert len(failures(records, limit=1)) == 1


def test_lease_age_is_the_ttl_less_the_time_left() -> None:
    assert lease_age(4.0, 10.0) == 6.0
    assert lease_age(None, 10.0) is None


def test_panel_position_names_the_next_panelist_then_the_moderator() -> None:
    spec = RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": "m", "rounds": 1},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "m", "b")]})
    assert policy_state_view(spec, {"spoken": "1"})["next"] == "b"
    done = policy_state_view(spec, {"spoken": "2"})
    assert (done["next"], done["panel"], done["spoken"]) == ("m", ["a", "b"], 2)


def test_panel_position_of_a_bid_room_is_none() -> None:
    spec = RoomSpec.model_validate(
        {"agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "b")]})
    assert policy_state_view(spec, {}) is None


def test_panel_position_after_the_verdict_names_nobody_next() -> None:
    spec = RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": "m", "rounds": 1},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "m", "b")]})
    over = policy_state_view(spec, {"spoken": "2"}, StopReason.VERDICT)
    assert (over["next"], over["ended"], over["spoken"]) == (None, "verdict", 2)
    assert over["note"] == "panel: 2 of 2 spoken, m gave the verdict"
    assert policy_state_view(spec, {"spoken": "2"})["ended"] is None


def test_an_answer_is_silent_when_its_agent_chose_to_say_nothing() -> None:
    mention = RoomSpec.model_validate({
        "policy": {"kind": "mention", "silent_token": "(pass)"},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "b")]})
    bid_room = RoomSpec.model_validate(
        {"agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "b")]})

    def answer(kind: CallKind, message: str, status: AnswerStatus = AnswerStatus.OK) -> Answer:
        return Answer(agent="a", turn=1, kind=kind, message=message, status=status)

    assert is_silent_answer(mention, answer(CallKind.DISCUSS, "[Pass.]"))
    assert not is_silent_answer(mention, answer(CallKind.DISCUSS, "pass it on"))
    assert is_silent_answer(bid_room, answer(CallKind.BID, ""))
    assert is_silent_answer(bid_room, answer(CallKind.INTENT, ""))
    assert not is_silent_answer(bid_room, answer(CallKind.BID, "", AnswerStatus.ERROR))
    assert not is_silent_answer(bid_room, answer(CallKind.REPLY, ""))  # a failed reply, not silence
    assert not is_silent_answer(bid_room, answer(CallKind.BID, "go"))


def test_agent_cards_are_in_spec_order_with_role_and_description() -> None:
    spec = RoomSpec.model_validate({"agents": [
        {"name": "dev", "role": "Developer", "description": "Knows the code", "model": "scripted",
         "script": []},
        {"name": "sre", "model": "openai/gpt-4o-mini"}]})
    assert agent_cards(spec) == [
        {"name": "dev", "role": "Developer", "description": "Knows the code", "model": "scripted",
         "running": []},
        {"name": "sre", "role": "", "description": "", "model": "openai/gpt-4o-mini",
         "running": []}]


def test_the_page_is_told_what_to_show_of_a_policy_by_its_record() -> None:
    panel = RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": "m", "rounds": 2},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "m", "b")]})
    assert policy_state_view(panel, {"spoken": "3"})["note"] == "panel: 3 of 4 spoken, next b"
    mention = RoomSpec.model_validate({
        "policy": {"kind": "mention"},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "b")]})
    assert policy_state_view(mention, {}) == {"speak_queue": True}


def test_the_policy_settings_shown_leave_out_the_agent_specs_a_policy_holds() -> None:
    spec = RoomSpec.model_validate({
        "policy": {"kind": "selector", "selector": {"model": "scripted", "script": []}},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "b")]})
    assert policy_view(spec) == {"kind": "selector", "max_turns": 12, "allow_repeat": False,
                                 "call_timeout_s": 60.0}
