"""The worker's provider client over real HTTP: requests go to the least busy of its
pools, and every request's pool learns when it is done, answered or failed."""

from __future__ import annotations

import threading

import httpx
import pytest

from parley.workers.http_pool import SpreadTransport
from tests.support.openai_stub import OpenAIStub, tool_call
from tests.support.polling import wait_until


def post(client: httpx.Client, url: str) -> int:
    return client.post(f"{url}/chat/completions", json={"model": "held", "messages": []},
                       headers={"authorization": "Bearer sk-pool"}).status_code


def test_requests_held_at_once_are_spread_over_the_pools_and_released_when_answered():
    answer_after = tool_call(0.5, "Held.", delay_s=1.0)
    with OpenAIStub(api_key="sk-pool", default=answer_after, keep_alive=True) as stub:
        transport = SpreadTransport(pools=3)
        with httpx.Client(transport=transport) as client:
            statuses: list[int] = []
            callers = [threading.Thread(target=lambda: statuses.append(post(client, stub.url)))
                       for _ in range(6)]
            for caller in callers:
                caller.start()
            wait_until(lambda: stub.in_flight == 6, 5, "six requests held by the stub")
            held = list(transport.in_flight)
            for caller in callers:
                caller.join(timeout=10)

    assert held == [2, 2, 2]
    assert statuses == [200] * 6
    assert transport.in_flight == [0, 0, 0]


def test_one_request_at_a_time_keeps_to_the_first_pool_and_its_connection():
    with OpenAIStub(api_key="sk-pool", default=tool_call(0.5, "Again."), keep_alive=True) as stub:
        transport = SpreadTransport(pools=4)
        with httpx.Client(transport=transport) as client:
            statuses = [post(client, stub.url) for _ in range(5)]
        connections = set(stub.connections)

    assert statuses == [200] * 5
    assert len(connections) == 1
    assert transport.in_flight == [0, 0, 0, 0]


def test_a_request_that_fails_to_connect_gives_its_pool_back():
    with OpenAIStub() as stub:
        url = stub.url  # the port is free again once the stub has stopped
    transport = SpreadTransport(pools=2)
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ConnectError):
        post(client, url)

    assert transport.in_flight == [0, 0]


@pytest.mark.parametrize("verify", [True, False])
def test_every_pool_shares_one_tls_context(verify):
    transport = SpreadTransport(verify=verify, pools=3)

    contexts = {id(pool._pool._ssl_context) for pool in transport.pools}
    assert len(contexts) == 1
    assert transport.pools[0]._pool._ssl_context.check_hostname is verify
