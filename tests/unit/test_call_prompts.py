"""A worker makes every call by its kind alone: each call kind's entry (workers.prompts)
holds its prompt, the tool it forces, whether it streams and what the room's spec adds to
its caller, so the task and the model client name no policy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parley.shared.models import (
    BidPolicy,
    CallKind,
    CallRequest,
    MentionPolicy,
    RoomSpec,
    RoundtablePolicy,
    SelectorPolicy,
)
from parley.workers.prompts import CALL_PROMPTS
from parley.workers.tasks import caller

REPOSITORY = Path(__file__).parents[2]


def test_only_bids_and_intents_force_the_respond_tool():
    forcing = {kind for kind, call in CALL_PROMPTS.items() if call.forces is not None}
    assert forcing == {CallKind.BID, CallKind.INTENT}


def test_the_calls_whose_answer_is_posted_stream_it():
    streamed = {kind for kind, call in CALL_PROMPTS.items() if call.streams}
    assert streamed == {CallKind.REPLY, CallKind.SPEAK, CallKind.PANEL, CallKind.MODERATE,
                        CallKind.DISCUSS, CallKind.HANDOFF}


def test_an_intents_caller_takes_the_rooms_intent_cap():
    spec = RoomSpec.model_validate({
        "policy": {"kind": "bid", "bid_mode": "intent", "intent_max_tokens": 25},
        "agents": [{"name": n, "model": "scripted", "script": [], "max_tokens": 300}
                   for n in ("a", "b")]})
    request = CallRequest(prefix="t", room="r", turn=1, attempt=1, agents=["a"],
                          kind=CallKind.INTENT, snapshot_seq=1, deadline=0, spec_version=1)
    assert caller(spec, request, "a").max_tokens == 25
    reply = request.model_copy(update={"kind": CallKind.REPLY})
    assert caller(spec, reply, "a").max_tokens == 300


@pytest.mark.parametrize("path", ["workers/tasks.py", "workers/llm.py", "workers/calls.py"])
def test_the_worker_names_no_policy_and_tells_no_call_kind_apart(path):
    text = (REPOSITORY / path).read_text()
    configs = (BidPolicy, SelectorPolicy, RoundtablePolicy, MentionPolicy)
    assert not [config.__name__ for config in configs if config.__name__ in text]
    assert not re.search(r"kind (is|is not|in|==) \{?CallKind\.", text)
