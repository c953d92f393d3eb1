"""A committed message carries the tool calls its answer was written from into its log
entry, through the real commit script on the real Redis: results capped, the entry
bounded, and read back as the message's ``tool_calls``."""

from __future__ import annotations

import functools

import orjson
import pytest
import redis.asyncio

from parley.shared.keys import Keys
from parley.shared.models import Message, ToolCallRecord, ToolCallStatus
from parley.shared.records import LEFT_OUT, TOOLS_FIELD_MAX_BYTES
from parley.shared.store import RoomStore
from tests.conftest import REDIS_URL
from tests.support.rooms import scripted_spec
from tests.support.tool_messages import commit_tool_message_now, tool_call

pytestmark = pytest.mark.redis

ROOM = "r1"


def commit_turn(keys: Keys, calls: list[ToolCallRecord], shared: bool = True,
                result_max_bytes: int = 16_384) -> None:
    """Commit Investigator's reply, written from ``calls``, as RoomRunner.commit does."""
    commit_tool_message_now(functools.partial(redis.asyncio.Redis.from_url, REDIS_URL), keys,
                            ROOM, "Investigator", "The checkout logs show timeouts.", calls,
                            shared=shared, result_max_bytes=result_max_bytes)


@pytest.fixture
def store(real_redis, keys: Keys) -> RoomStore:
    """Room r1 of a selector and the investigator, its task posted."""
    store = RoomStore(real_redis, keys)
    store.create_room(ROOM, scripted_spec({"Selector": [], "Investigator": []}))
    store.post(ROOM, "User", "Why does checkout fail?")
    return store


def posted(store: RoomStore) -> Message:
    """The room's second message: the committed reply."""
    messages = store.read_messages(ROOM)
    assert [m.sender for m in messages] == ["User", "Investigator"]
    return messages[1]


def test_the_committed_message_carries_its_answers_tool_calls(store, keys):
    calls = [tool_call(0), tool_call(1, status=ToolCallStatus.DENIED, result="no",
                                     approved_by="")]
    commit_turn(keys, calls)
    message = posted(store)
    assert message.tool_calls == calls
    assert message.tool_results == "shared"
    assert message.shows_tool_results("Selector")


def test_a_private_rooms_message_shows_its_results_to_its_sender_only(store, keys):
    commit_turn(keys, [tool_call(0)], shared=False)
    message = posted(store)
    assert message.tool_results == "private"
    assert message.shows_tool_results("Investigator")
    assert not message.shows_tool_results("Selector")


def test_each_result_is_cut_to_the_tool_result_cap(store, keys):
    commit_turn(keys, [tool_call(0, result="é" * 2000)], result_max_bytes=256)
    (call,) = posted(store).tool_calls or []
    assert len(call.result.encode()) <= 256
    assert call.result.startswith("é" * 100)
    assert call.result.endswith("…cut]")


def test_a_message_of_many_tool_calls_stays_a_bounded_log_entry(store, keys, real_redis):
    calls = [tool_call(index, result="x" * 2000) for index in range(200)]
    commit_turn(keys, calls)
    (_, fields), = real_redis.xrange(keys.log(ROOM), "2-0", "2-0")
    assert len(fields[b"tools"]) <= TOOLS_FIELD_MAX_BYTES
    kept = posted(store).tool_calls or []
    full = [call for call in kept if call.result != LEFT_OUT]
    assert full == calls[:len(full)] and 0 < len(full) < len(kept)
    # Past the cap a call still says what it was, without its arguments or result.
    assert kept[-1].tool == "search_logs" and kept[-1].arguments == {}
    assert kept[-1].status is ToolCallStatus.OK and kept[-1].duration_ms == 12.5


def test_a_message_without_tool_calls_has_no_tool_fields(store, keys, real_redis):
    commit_turn(keys, [])
    (_, fields), = real_redis.xrange(keys.log(ROOM), "2-0", "2-0")
    assert b"tools" not in fields and b"tool_results" not in fields
    message = posted(store)
    assert message.tool_calls is None and message.tool_results is None
    assert orjson.loads(message.model_dump_json())["tool_calls"] is None
