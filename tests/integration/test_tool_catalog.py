"""The tool catalog on the real Redis: each worker's offer published and read back, offers
of several workers merged by tool, an offer gone when its worker stops or stops refreshing
it, a room naming tools refused at create unless a live worker offers them, and
`parley tools` as its own process."""

from __future__ import annotations

import json
import time

import pytest
import redis
from structlog.testing import capture_logs

from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.shared.tool_catalog import ToolsRefused, live_workers, read_catalog
from parley.workers.tools.base import ToolDef, ToolOptions
from parley.workers.tools.catalog_publisher import CatalogPublisher
from tests.conftest import REDIS_URL
from tests.support.commands import run_parley
from tests.support.polling import wait_until
from tests.support.rooms import scripted_spec
from tests.support.tool_catalog import GRAFANA_QUERY, OPS_TOOLS, ROLLBACK, SEARCH_LOGS, publish

pytestmark = pytest.mark.redis


def test_a_published_offer_is_read_back_as_the_catalog(real_redis: redis.Redis, keys: Keys):
    publish(real_redis, keys, "w1", OPS_TOOLS)

    catalog = read_catalog(real_redis, keys)

    assert list(catalog) == ["grafana/query", "rollback", "search_logs"]
    logs = catalog["search_logs"]
    assert logs.description == SEARCH_LOGS.description
    assert logs.parameters == SEARCH_LOGS.parameters
    assert logs.options.model_dump() == {"approval": False, "idempotent": True,
                                         "timeout_s": 30.0, "queue": None}
    assert logs.workers == ["w1"]
    assert catalog["rollback"].options.model_dump() == {"approval": True, "idempotent": False,
                                                        "timeout_s": 120.0, "queue": "ops"}
    assert 0 < real_redis.pttl(keys.tool_worker("w1")) <= 15_000


def test_a_tool_offered_by_several_workers_is_one_entry_listing_them(real_redis, keys):
    asking = ToolDef(SEARCH_LOGS.name, "another description", {}, ToolOptions(approval=True))
    publish(real_redis, keys, "w2", [asking])
    publish(real_redis, keys, "w1", [SEARCH_LOGS, ROLLBACK])

    catalog = read_catalog(real_redis, keys)

    assert catalog["search_logs"].workers == ["w1", "w2"]
    assert catalog["search_logs"].description == SEARCH_LOGS.description  # the first by id
    assert catalog["search_logs"].options.approval  # one worker asks: the tool needs approval
    assert catalog["rollback"].workers == ["w1"]


def test_an_offer_not_refreshed_expires_and_leaves_the_index_at_the_next_publish(
        real_redis, keys):
    publish(real_redis, keys, "gone", [ROLLBACK], interval_s=0.1)  # expires after 0.3 s
    publish(real_redis, keys, "alive", [SEARCH_LOGS])
    assert set(read_catalog(real_redis, keys)) == {"rollback", "search_logs"}

    wait_until(lambda: "rollback" not in read_catalog(real_redis, keys), 5,
               "the unrefreshed offer to expire")
    assert live_workers(real_redis, keys) == ["alive"]
    expiry_ms = real_redis.zscore(keys.tool_workers, "gone")
    wait_until(lambda: time.time() * 1000 > expiry_ms, 5, "the offer's listed expiry to pass")
    publish(real_redis, keys, "alive", [SEARCH_LOGS])
    assert real_redis.zrange(keys.tool_workers, 0, -1) == [b"alive"]


def test_a_publisher_refreshes_its_offer_and_withdraws_it_when_stopped(real_redis, keys):
    publisher = CatalogPublisher(real_redis, keys, "w1", lambda: [SEARCH_LOGS], 0.1).start()
    try:
        wait_until(lambda: "search_logs" in read_catalog(real_redis, keys), 5, "the offer")
        # Refreshed: still there well past one offer's ttl (0.3 s).
        first_expiry = real_redis.zscore(keys.tool_workers, "w1")
        wait_until(lambda: real_redis.zscore(keys.tool_workers, "w1") > first_expiry + 300, 5,
                   "the offer refreshed past its first expiry")
        assert "search_logs" in read_catalog(real_redis, keys)
    finally:
        publisher.stop()

    assert not publisher.thread.is_alive()
    assert real_redis.exists(keys.tool_worker("w1")) == 0
    assert real_redis.zrange(keys.tool_workers, 0, -1) == []
    assert read_catalog(real_redis, keys) == {}


def test_a_failing_tool_listing_is_logged_and_the_next_publish_goes_on(real_redis, keys):
    calls = []

    def tools() -> list[ToolDef]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the MCP server did not answer")
        return [SEARCH_LOGS]

    with capture_logs() as logs:
        publisher = CatalogPublisher(real_redis, keys, "w1", tools, 0.05).start()
        try:
            wait_until(lambda: "search_logs" in read_catalog(real_redis, keys), 5,
                       "the offer after the failed listing")
        finally:
            publisher.stop()
    failed = [entry for entry in logs if entry["event"] == "tool_catalog_publish_failed"]
    assert failed[0]["error"] == "RuntimeError: the MCP server did not answer"


def test_an_unreadable_offer_is_left_out_and_the_others_read(real_redis, keys):
    publish(real_redis, keys, "good", [SEARCH_LOGS])
    real_redis.set(keys.tool_worker("bad"), '{"worker": "bad", "tools": [{"name": 7}]}', px=10_000)
    real_redis.zadd(keys.tool_workers, {"bad": 1e15})

    with capture_logs() as logs:
        catalog = read_catalog(real_redis, keys)

    assert list(catalog) == ["search_logs"]
    assert [entry["worker"] for entry in logs if entry["event"] == "tool_offer_unreadable"] == ["bad"]


def test_the_catalog_keys_share_one_cluster_slot(keys):
    tagged = [keys.tool_workers, keys.tool_worker("parley@host-1"), keys.tool_worker("w2")]
    assert {key.split("{", 1)[1].split("}", 1)[0] for key in tagged} == {"tools"}


def tools_spec(tools: list[str], approve: list[str] | None = None, approvers=()):  # noqa: ANN201
    spec = scripted_spec({"Investigator": [{"content": "done"}], "SRE": [{"content": "ok"}]},
                         bid_mode="intent")  # a full bid runs no tools
    investigator = spec.agents[0].model_copy(update={"tools": tools, "approve": approve or []})
    return spec.model_copy(update={"agents": [investigator, spec.agents[1]],
                                   "approvers": list(approvers)})


@pytest.fixture
def client(settings: Settings, real_redis) -> Client:
    return Client(settings)


def test_the_client_creates_a_room_whose_tools_a_live_worker_offers(client, real_redis, keys):
    publish(real_redis, keys, "w1", OPS_TOOLS)
    room = client.create_room(tools_spec(["search_logs", "grafana/*", "rollback"],
                                         approvers=["alice"]))
    assert client.store.read_spec(room)[1].agents[0].tools == ["search_logs", "grafana/*",
                                                                "rollback"]


@pytest.mark.parametrize(("tools", "approvers", "refusal"), [
    (["search_logs", "read_metrics"], ["alice"],
     "agent 'Investigator' names tool 'read_metrics', which no live worker offers "
     "(see parley tools)"),
    (["github/*"], [],
     "agent 'Investigator' names tool 'github/*', but no live worker offers a tool of "
     "server 'github' (see parley tools)"),
    (["rollback"], [],
     "agent 'Investigator' may call tool 'rollback', which needs a person's approval, and "
     "the room has no approvers: name who may approve in approvers"),
])
def test_the_client_refuses_a_room_naming_tools_it_cannot_have(client, real_redis, keys, tools,
                                                              approvers, refusal):
    publish(real_redis, keys, "w1", [SEARCH_LOGS, ROLLBACK, GRAFANA_QUERY])
    with pytest.raises(ToolsRefused) as refused:
        client.create_room(tools_spec(tools, approvers=approvers), "r1")
    assert str(refused.value) == refusal
    assert not real_redis.exists(keys.spec("r1"))


def test_a_tool_whose_only_worker_stopped_is_refused(client, real_redis, keys):
    publish(real_redis, keys, "w1", [SEARCH_LOGS]).stop()
    with pytest.raises(ToolsRefused, match="'search_logs', which no live worker offers"):
        client.create_room(tools_spec(["search_logs"]))


def test_tools_as_its_own_process_reads_the_real_redis(real_redis: redis.Redis, keys: Keys, prefix: str):
    publish(real_redis, keys, "w1", [SEARCH_LOGS])
    env = {"PARLEY_REDIS_URL": REDIS_URL, "PARLEY_KEY_PREFIX": prefix}

    listed = run_parley(env, "tools", "--json")

    assert listed.returncode == 0, listed.stderr
    assert [tool["name"] for tool in json.loads(listed.stdout)["tools"]] == ["search_logs"]
    unreachable = run_parley({**env, "PARLEY_REDIS_URL": "redis://127.0.0.1:1/0"}, "tools")
    assert unreachable.returncode == 2
    assert unreachable.stderr.startswith("parley: cannot reach Redis at redis://127.0.0.1:1/0")
