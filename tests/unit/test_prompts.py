"""What a bid call sends: the respond tool, the decide prompt, typed turns, the budget."""

from __future__ import annotations

import pytest

from shared.models import AgentSpec, Message
from workers.prompts import (
    RESPOND_CHOICE,
    RESPOND_TOOL,
    build_prompt,
    chat_turns,
    decide_prompt,
    input_budget,
    system_message,
    trim_oldest,
)

SKEPTIC = AgentSpec(name="Skeptic", role="finds what fails first", model="openai/gpt-4o-mini",
                    system_prompt="You are a risk-focused skeptic.")
OPTIMIST = AgentSpec(name="Optimist", role="argues for the upside", model="openai/gpt-4o-mini")
ECONOMIST = AgentSpec(name="Economist", model="openai/gpt-4o-mini")
ROOM = [OPTIMIST, SKEPTIC, ECONOMIST]


def transcript(*lines: tuple[str, str]) -> list[Message]:
    return [Message(seq=i, sender=sender, content=content)
            for i, (sender, content) in enumerate(lines, start=1)]


def word_count(messages: list[dict]) -> int:
    """A stand-in token counter: a token per word and two per message."""
    return sum(len(str(m["content"]).split()) + 2 for m in messages)


def test_the_respond_tool_is_seed_001s_schema_and_is_forced_by_name():
    function = RESPOND_TOOL["function"]
    assert function["name"] == "respond"
    assert function["parameters"]["required"] == ["score", "message"]
    assert function["parameters"]["properties"]["score"] == {
        "type": "number", "minimum": 0, "maximum": 1,
        "description": "How much you want to respond (0 = silent, 1 = strongly want to)."}
    assert function["parameters"]["properties"]["message"]["type"] == "string"
    assert RESPOND_CHOICE == {"type": "function", "function": {"name": "respond"}}


def test_the_decide_prompt_names_the_agent_the_others_and_the_latest_message():
    prompt = decide_prompt(SKEPTIC, ROOM, transcript(("User", "Launch?"),
                                                     ("Optimist", "Ship it now.")))
    assert prompt.startswith("You are Skeptic,")
    assert "Optimist (argues for the upside), Economist." in prompt
    assert "Skeptic (" not in prompt
    assert "Latest message, from Optimist:\nShip it now." in prompt


def test_the_decide_prompt_is_biased_toward_silence():
    prompt = decide_prompt(SKEPTIC, ROOM, transcript(("User", "Launch?"))).lower()
    assert "staying quiet is the normal choice" in prompt
    for high in ("expertise", "addressed by name", "error you can correct", "concrete next step"):
        assert high in prompt
    for low in ("outside your role", "already been made", "only agree", "you spoke last"):
        assert low in prompt
    assert "score 0 and an empty message" in prompt


def test_the_decide_prompt_tells_an_agent_when_the_latest_message_is_its_own():
    prompt = decide_prompt(SKEPTIC, ROOM, transcript(("User", "Launch?"), ("Skeptic", "Wait.")))
    assert "Latest message, from Skeptic (you):" in prompt


def test_own_posts_are_assistant_turns_and_others_are_user_turns_with_the_speaker():
    turns = chat_turns("Skeptic", transcript(("User", "Launch?"), ("Skeptic", "What fails?"),
                                             ("Optimist", "Nothing.")))
    assert turns == [
        {"role": "user", "content": "User: Launch?"},
        {"role": "assistant", "content": "What fails?"},
        {"role": "user", "content": "Optimist: Nothing."},
    ]


def test_the_system_prompt_comes_first_and_the_decide_prompt_last():
    prompt = build_prompt(SKEPTIC, ROOM, transcript(("User", "Launch?")), None, word_count)
    assert prompt.messages[0] == {"role": "system", "content": "You are a risk-focused skeptic."}
    assert prompt.messages[1] == {"role": "user", "content": "User: Launch?"}
    assert prompt.messages[-1]["role"] == "user"
    assert prompt.messages[-1]["content"].startswith("You are Skeptic,")
    assert prompt.dropped == 0


def test_an_agent_without_a_system_prompt_gets_its_name_and_role():
    assert system_message(OPTIMIST)["content"] == "You are Optimist, who argues for the upside."
    assert system_message(ECONOMIST)["content"] == "You are Economist."


def test_the_budget_leaves_room_for_the_reply_and_a_margin():
    assert input_budget(10_000, 500) == 9_000
    assert input_budget(10_000, None) == 9_500 - 1024
    assert input_budget(1_000, None) == 950 - 250
    assert input_budget(None, 500) is None


def test_trimming_drops_the_oldest_turns_but_keeps_the_first():
    turns = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    kept, dropped = trim_oldest(turns, 3, lambda turn: 1)
    assert [turn["content"] for turn in kept] == ["m0", "m4", "m5"]
    assert dropped == 3


def test_trimming_keeps_the_first_turn_even_when_nothing_else_fits():
    turns = [{"role": "user", "content": f"m{i}"} for i in range(4)]
    kept, dropped = trim_oldest(turns, 0, lambda turn: 5)
    assert kept == turns[:1] and dropped == 3


def test_a_long_transcript_is_trimmed_into_the_budget_keeping_the_task():
    lines = [("User", "the task")] + [("Optimist" if i % 2 else "Economist", "word " * 20)
                                      for i in range(50)]
    budget = 400
    prompt = build_prompt(SKEPTIC, ROOM, transcript(*lines), budget, word_count)
    assert word_count(prompt.messages) <= budget
    assert prompt.messages[1] == {"role": "user", "content": "User: the task"}
    assert prompt.dropped > 0
    assert len(prompt.messages) == 2 + 51 - prompt.dropped
    # What is kept is the newest part of the conversation, in order.
    kept = prompt.messages[2:-1]
    assert kept == chat_turns("Skeptic", transcript(*lines))[1 + prompt.dropped:]


def test_a_transcript_within_the_budget_is_sent_whole():
    lines = [("User", "the task"), ("Optimist", "short")]
    prompt = build_prompt(SKEPTIC, ROOM, transcript(*lines), 10_000, word_count)
    assert prompt.dropped == 0 and len(prompt.messages) == 4


@pytest.mark.parametrize("budget", [None, 50])
def test_an_empty_transcript_still_builds_a_prompt(budget):
    prompt = build_prompt(SKEPTIC, ROOM, [], budget, word_count)
    assert [m["role"] for m in prompt.messages] == ["system", "user"]
