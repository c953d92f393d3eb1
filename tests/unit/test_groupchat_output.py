"""The swarms-compatible front door's output types and streaming replay."""

from __future__ import annotations

import json

import pytest

from parley.shared.models import Message
from parley.swarms.groupchat import GroupChat, format_history, stream_message

MESSAGES = [
    Message(seq=1, sender="User", content="task"),
    Message(seq=2, sender="A", content="first reply", score=0.9),
    Message(seq=3, sender="B", content="second", score=0.7),
]


def test_str_all_except_first_is_every_reply_without_the_task():
    assert format_history(MESSAGES, "str-all-except-first") == "first reply\nsecond"


def test_str_is_role_and_content_per_message():
    assert format_history(MESSAGES, "str") == "User: task\n\nA: first reply\n\nB: second"


def test_list_is_role_and_content_dicts():
    assert format_history(MESSAGES, "list")[1] == {"role": "A", "content": "first reply"}


def test_dict_keeps_the_raw_score_as_metadata_and_none_for_the_seed():
    rows = format_history(MESSAGES, "dict")
    assert "metadata" not in rows[0]
    assert rows[2]["metadata"] == {"score": 0.7}


def test_json_and_final_types():
    assert json.loads(format_history(MESSAGES, "json"))[0]["content"] == "task"
    assert format_history(MESSAGES, "final") == "second"
    assert format_history(MESSAGES, "list-final") == ["second"]


def test_streaming_replays_words_then_a_final_empty_chunk():
    calls: list[tuple[str, str, bool]] = []
    stream_message(MESSAGES[1], lambda *call: calls.append(call))
    assert calls == [("A", "first ", False), ("A", "reply", False), ("A", "", True)]


def test_fewer_than_two_agents_is_refused_like_swarms():
    with pytest.raises(ValueError, match="at least 2 agents"):
        GroupChat(agents=[{"name": "A", "model": "scripted", "script": []}])


def test_an_unknown_output_type_is_refused_up_front():
    agents = [{"name": n, "model": "scripted", "script": []} for n in "AB"]
    with pytest.raises(ValueError, match="output_type must be one of"):
        GroupChat(agents=agents, output_type="xml")
