"""Text a model wrote that UTF-8 cannot hold (a lone surrogate: a JSON "\\ud83d" decodes to
one) is written with U+FFFD in its place, not left to fail the write of every answer of
the same message."""

from __future__ import annotations

import time

import pytest
import redis

from parley.shared.models import AgentSpec, Answer, AnswerStatus
from parley.shared.settings import Settings, get_settings
from parley.shared.store import RoomStore
from parley.workers.calls import Call, answer_call
from parley.workers.tasks import worker_client
from tests.conftest import REDIS_URL
from tests.support.openai_stub import OpenAIStub, tool_call
from tests.support.rooms import scripted_spec

pytestmark = [pytest.mark.redis,
              pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")]

KEY_ENV, KEY = "PARLEY_STUB_KEY", "sk-stub-key"
ROOM = "r-text"


def test_a_reply_holding_a_lone_surrogate_is_written_and_so_are_the_answers_beside_it(
        worker_env, real_redis, keys):
    with OpenAIStub(api_key=KEY) as stub:
        worker_env(**{KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
                      "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
        stub.script("skeptic", tool_call(0.8, "half a pair \ud83d and a whole one \U0001f600"))
        agent = AgentSpec(name="Skeptic", model="openai/skeptic", api_base=stub.url,
                          api_key_env=KEY_ENV)
        other = AgentSpec(name="Optimist", model="scripted", script=[])
        reply = answer_call(agent, [other, agent], Call(1, 0), list, time.time() + 10,
                            settings=get_settings())
    assert reply.status is AnswerStatus.OK and "\ud83d" in reply.message
    beside = Answer(agent="Optimist", turn=1, message="Ship it.")
    RoomStore(real_redis, keys).create_room(ROOM, scripted_spec({"Skeptic": [], "Optimist": []}))

    strict = RoomStore(redis.Redis.from_url(REDIS_URL), keys)
    with pytest.raises(UnicodeEncodeError):
        strict.write_answers(ROOM, [reply, beside], 100)
    store = RoomStore(worker_client(Settings(redis_url=REDIS_URL)), keys)
    assert store.write_answers(ROOM, [reply, beside], 100) == 2

    written = {answer.agent: answer.message for _, answer in store.read_answers(ROOM)}
    assert written == {"Skeptic": "half a pair \ufffd and a whole one \U0001f600",
                       "Optimist": "Ship it."}
