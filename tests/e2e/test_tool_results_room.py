"""Tool results in what real models are sent: a message written from tool calls (committed
as a coordinator commits it) is followed by its results in the requests a real `parley
worker` sends, through litellm, to a local OpenAI-compatible stub that records them: every
agent's in a room whose tool_results is shared, only the caller's in a private one."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
import redis.asyncio

from parley.shared.models import RoomSpec, RoomStatus
from parley.shared.store import RoomStore
from tests.conftest import REDIS_URL
from tests.support.openai_stub import OpenAIStub
from tests.support.polling import wait_until
from tests.support.tool_messages import commit_tool_message_now, tool_call

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
RESULT = "2026-03-01T10:02 checkout ERROR card declined for order 4411"
# The worker imports litellm on its first real call (preloading is off in tests): seconds.
BID_TIMEOUT_S = 60


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """The stub provider: every agent bids silence, so each run ends in a lull."""
    with OpenAIStub(api_key=KEY) as server:
        yield server


def incident_room(stub: OpenAIStub, queue: str, tool_results: str) -> RoomSpec:
    """A bid room of the investigator and the SRE, each ``openai/<room>-<agent>`` on the
    stub."""
    return RoomSpec.model_validate({
        "name": f"incident-{tool_results}",
        "tool_results": tool_results,
        "policy": {"kind": "bid", "bid_timeout_s": BID_TIMEOUT_S},
        "agents": [{"name": name, "model": f"openai/{tool_results}-{name.lower()}",
                    "api_base": stub.url, "api_key_env": KEY_ENV, "queue": queue}
                   for name in ("Investigator", "SRE")],
    })


def seed(store: RoomStore, room: str, spec: RoomSpec) -> None:
    """The room created, its task posted and the investigator's message written from a
    search_logs call committed, its run going on."""
    store.create_room(room, spec)
    store.post(room, "User", "Why does checkout fail?")
    commit_tool_message_now(functools.partial(redis.asyncio.Redis.from_url, REDIS_URL),
                            store.keys, room, "Investigator", "Cards are declined.",
                            [tool_call(result=RESULT)],
                            shared=spec.tool_results == "shared")


def sent_to(stub: OpenAIStub, model: str) -> str:
    """Every message of every request the stub answered for ``model``, as one text."""
    requests = stub.requests_for(model)
    assert requests, f"no request reached {model}"
    return "\n".join(str(message.get("content")) for item in requests
                     for message in item.body["messages"])


def test_the_requests_models_are_sent_carry_tool_results_only_to_those_who_may_read_them(
        stub, processes, real_redis, keys, queue):
    store = RoomStore(real_redis, keys)
    for mode in ("shared", "private"):
        seed(store, f"room-{mode}", incident_room(stub, queue, mode))
    processes.worker("-Q", queue, "-c", "8", env={
        KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
        "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
    processes.coordinator()

    for mode in ("shared", "private"):
        wait_until(lambda mode=mode: store.read_state(f"room-{mode}").status is RoomStatus.IDLE
                   and store.read_state(f"room-{mode}").turn >= 2,
                   BID_TIMEOUT_S * 2, f"the {mode} room's run to end")

    assert RESULT in sent_to(stub, "shared-sre")
    assert RESULT in sent_to(stub, "shared-investigator")
    assert RESULT in sent_to(stub, "private-investigator")
    private_sre = sent_to(stub, "private-sre")
    assert RESULT not in private_sre and "search_logs" not in private_sre
    assert "Cards are declined." in private_sre
