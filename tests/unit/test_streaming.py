"""Streamed replies and prompt caching, piece by piece: chunk coalescing, the chunk script,
scripted streaming, the prompt layout providers cache, and cached tokens in the totals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from parley.shared.events import MessageChunk
from parley.shared.keys import Keys
from parley.shared.models import AgentSpec, Answer, CallKind, Message, RoomSpec, TurnRecord
from parley.shared.records import RoomState, usage_from, usage_increments
from parley.shared.settings import get_settings
from parley.shared.store import RoomStore
from parley.workers.calls import Call, answer_call
from parley.workers.prompts import (
    CACHE_BREAKPOINT,
    build_intent_prompt,
    build_prompt,
    build_reply_prompt,
    with_cache_breakpoint,
)
from parley.workers.scripted import stream_words
from parley.workers.streaming import CHUNK_S, ChunkWriter
from tests.support.clock import FakeClock

ROOM = "room-1"


def writer(hold: str = "") -> tuple[ChunkWriter, list[tuple[int, str]], FakeClock]:
    written: list[tuple[int, str]] = []
    clock = FakeClock()
    return ChunkWriter(lambda i, t: written.append((i, t)) or True, hold, clock), written, clock


def test_the_first_delta_goes_out_at_once_then_deltas_are_coalesced():
    chunks, written, clock = writer()
    chunks.write("Hel")
    chunks.write("lo")
    chunks.write(", wor")
    assert written == [(0, "Hel")]
    clock.now += CHUNK_S
    chunks.write("ld")
    assert written == [(0, "Hel"), (1, "lo, world")]
    chunks.write("!")
    chunks.finish()
    chunks.finish()
    assert written[-1] == (2, "!")
    assert "".join(text for _, text in written) == "Hello, world!"


def test_a_text_started_over_goes_out_again_from_chunk_0_without_the_failed_attempts():
    chunks, written, clock = writer()
    chunks.write("session a prompt 1:")
    chunks.write(" half")
    chunks.restart()
    chunks.write("session b prompt 1:")
    clock.now += CHUNK_S
    chunks.write(" done.")
    chunks.finish()
    assert written == [(0, "session a prompt 1:"), (0, "session b prompt 1:"), (1, " done.")]


@pytest.mark.parametrize("token_s", [0.001, 0.02, 0.2])
def test_a_reply_costs_at_most_ten_events_a_second_however_fast_it_comes(token_s):
    chunks, written, clock = writer()
    for _ in range(1000):
        clock.now += token_s
        chunks.write("word")
    chunks.flush()
    assert len(written) <= 1000 * token_s / CHUNK_S + 2
    assert "".join(text for _, text in written) == "word" * 1000


@pytest.mark.parametrize("pieces", [["(sil", "ent", ")"], ["(Sil", "ent.", ")"], ["Silent", "."],
                                    ["[SIL", "ENT]"], ["  (silent", ")."]])
def test_the_silent_token_is_never_shown_however_it_is_written(pieces):
    chunks, written, _ = writer(hold="(silent)")
    for piece in pieces:
        chunks.write(piece)
    chunks.finish()
    assert written == []


@pytest.mark.parametrize("pieces", [["(si", "gh) fine"], ["(Silent", ".) but"], ["Sil", "ly"]])
def test_a_reply_that_only_starts_like_the_silent_token_is_shown_whole(pieces):
    chunks, written, _ = writer(hold="(silent)")
    for piece in pieces:
        chunks.write(piece)
    chunks.finish()
    assert "".join(text for _, text in written) == "".join(pieces)


def test_a_reply_held_to_its_end_is_shown_when_it_is_not_the_token():
    chunks, written, _ = writer(hold="(silent)")
    chunks.write("(sil")
    chunks.flush()
    assert written == []
    chunks.finish()
    assert written == [(0, "(sil")]


@pytest.mark.parametrize("text", ["one", "one two  three ", "", "a\nb c"])
def test_scripted_words_concatenate_to_the_text(text):
    assert "".join(stream_words(text)) == text


def test_a_scripted_reply_streams_word_by_word_and_a_bid_does_not():
    agent = AgentSpec(name="A", model="scripted",
                      script=[{"content": "three short words"}, {"score": 0.9, "message": "x y"}])
    pieces: list[str] = []
    stream = ChunkWriter(lambda i, t: pieces.append(t) or True, clock=lambda: 0.0)
    bid = answer_call(agent, [agent], Call(1, 1, CallKind.REPLY, 1, 1), lambda: [], 1e12, stream,
                   settings=get_settings())
    assert bid.message == "three short words"
    assert "".join(pieces) == "three short words" and len(pieces) == 2
    bid = answer_call(agent, [agent], Call(1, 1, CallKind.INTENT, 0, 2), lambda: [], 1e12,
                   settings=get_settings())
    assert (bid.score, bid.message) == (0.9, "x y")


def test_a_chunk_is_written_only_while_its_turn_is_open_in_a_room_that_exists(sync_redis):
    keys = Keys("t")
    store = RoomStore(sync_redis, keys)
    spec = RoomSpec.model_validate({"agents": [{"name": n, "model": "scripted", "script": []}
                                               for n in ("A", "B")]})
    store.create_room(ROOM, spec)
    assert not store.write_chunk(ROOM, 1, 0, "A", 0, "hi")  # no turn open
    sync_redis.hset(keys.state(ROOM), mapping={"turn_open": "1", "turn": "3", "run": "2"})
    assert not store.write_chunk(ROOM, 2, 0, "A", 0, "hi")  # another turn
    assert store.write_chunk(ROOM, 3, 1, "A", 4, "hi there")
    (event,) = store.read_events(ROOM)
    assert isinstance(event, MessageChunk)
    assert (event.turn, event.run, event.phase, event.agent, event.index, event.text) == (
        3, 2, 1, "A", 4, "hi there")
    assert not store.write_chunk("gone", 3, 1, "A", 0, "x")
    assert not sync_redis.exists(keys.events("gone"))


AGENT = AgentSpec(name="A", model="openai/x", system_prompt="You are A.")
OTHER = AgentSpec(name="B", model="openai/x")
TRANSCRIPT = [Message(seq=1, sender="User", content="task"),
              Message(seq=2, sender="B", content="first"),
              Message(seq=3, sender="A", content="second")]


def count(messages: list[dict]) -> int:
    return sum(len(str(m["content"]).split()) + 2 for m in messages)


@pytest.mark.parametrize("build", [build_prompt, build_intent_prompt, build_reply_prompt])
def test_what_changes_turn_to_turn_comes_last(build):
    earlier = build(AGENT, [AGENT, OTHER], TRANSCRIPT[:2], None, count).messages
    later = build(AGENT, [AGENT, OTHER], TRANSCRIPT, None, count).messages
    assert later[0]["role"] == "system"
    # Everything but the instruction is the next turn's prompt's start: a provider caches it.
    assert later[:len(earlier) - 1] == earlier[:-1]
    assert later[-1]["role"] == "user" and later[-1] != later[-2]


def test_the_reply_prompt_repeats_the_intent_prompts_start_and_ends_with_the_intent():
    intent = build_intent_prompt(AGENT, [AGENT, OTHER], TRANSCRIPT, None, count).messages
    reply = build_reply_prompt(AGENT, [AGENT, OTHER], TRANSCRIPT, None, count,
                               intent="say the plan").messages
    assert reply[:-1] == intent[:-1]
    assert "> say the plan" in reply[-1]["content"]
    assert "respond tool" in intent[-1]["content"] and "intent" in intent[-1]["content"]


def test_the_cache_breakpoint_marks_the_end_of_what_the_next_prompt_repeats():
    messages = build_prompt(AGENT, [AGENT, OTHER], TRANSCRIPT, None, count).messages
    marked = with_cache_breakpoint(messages)
    assert marked[-1] == messages[-1] and marked[:-2] == messages[:-2]
    assert marked[-2]["content"] == [{"type": "text", "text": messages[-2]["content"],
                                      "cache_control": CACHE_BREAKPOINT}]
    assert messages[-2]["content"] == "second"  # the original is left as it was
    assert with_cache_breakpoint(messages[:1]) == messages[:1]


def test_cached_prompt_tokens_are_counted_apart_in_the_turn_and_the_totals():
    bids = [Answer(agent="A", turn=1, prompt_tokens=100, cached_tokens=80, completion_tokens=5),
            Answer(agent="B", turn=1, prompt_tokens=50, completion_tokens=5)]
    increments = usage_increments(bids)
    assert float(increments["cached_tokens"]) == 80
    assert float(increments["run_cached_tokens"]) == 80
    assert float(increments["agent:A:cached_tokens"]) == 80
    assert "agent:B:cached_tokens" not in increments
    record = TurnRecord(turn=1, run=1, run_turns=1, epoch=1, snapshot_seq=1, messages_in_run=1,
                        recent=[], bids=bids)
    assert (record.prompt_tokens, record.cached_tokens) == (150, 80)
    state = RoomState({"cached_tokens": "80", "prompt_tokens": "150", "run_cached_tokens": "80"})
    assert state.usage.cached_tokens == usage_from(state.raw, "run_").cached_tokens == 80
    assert state.totals()["cached_tokens"] == 80.0


def test_the_cached_tokens_a_provider_reports_are_read_from_its_usage():
    from parley.workers.llm import cached_tokens

    assert cached_tokens(SimpleNamespace(prompt_tokens_details=SimpleNamespace(cached_tokens=7))) == 7
    assert cached_tokens(SimpleNamespace(prompt_tokens_details={"cached_tokens": 3})) == 3
    assert cached_tokens(SimpleNamespace(prompt_tokens_details=None)) == 0
    assert cached_tokens(None) == 0


@pytest.mark.parametrize("kind", ["speak", "select", "panel", "moderate", "discuss"])
def test_a_thread_prompt_keeps_the_thread_before_its_instruction(kind):
    from parley.workers.prompts import CALL_PROMPTS

    build = CALL_PROMPTS[CallKind(kind)].build
    earlier = build(AGENT, [AGENT, OTHER], TRANSCRIPT[:2], None, count).messages[-1]["content"]
    later = build(AGENT, [AGENT, OTHER], TRANSCRIPT, None, count).messages[-1]["content"]
    # The next turn's prompt repeats this one up to the end of its thread: cacheable.
    thread_end = earlier.index("first") + len("first")
    assert later[:thread_end] == earlier[:thread_end]
    # ... and the instruction, the same every turn, comes after the thread.
    assert later.endswith(earlier[earlier.index("</conversation>"):])


@pytest.mark.parametrize(("model", "hinted"), [
    ("anthropic/claude-3-5-sonnet-20240620", True),
    ("bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", True),
    ("openai/gpt-4o-mini", False),
    ("deepseek/deepseek-chat", False),
])
def test_only_providers_that_cache_where_marked_get_the_cache_hint(model, hinted):
    from parley.workers.llm import needs_cache_hint

    assert needs_cache_hint(AgentSpec(name="A", model=model)) is hinted
