"""Organizations without processes: their own provider keys on a worker, their daily
limits as budget checks, and their day's totals."""

from __future__ import annotations

import fakeredis
import pytest

from parley.coordinator.policies.budget import budget_detail, first_reached, left_in, org_limits_of
from parley.shared.keys import Keys
from parley.shared.models import AgentSpec, Answer, Usage
from parley.shared.organizations import (
    OrgLimits,
    add_usage,
    key_variable,
    read_limits,
    usage_of,
    utc_day,
    write_limits,
)
from parley.shared.settings import Settings
from parley.workers.credentials import Credential, credential_for, redact_keys

ACME_KEY = "sk-acme-own-key-1234"


def agent() -> AgentSpec:
    return AgentSpec(name="a", model="openai/gpt-4o-mini", api_key_env="OPENAI_API_KEY")


def test_an_organizations_own_key_is_used_for_its_rooms_and_the_clusters_for_others(
        monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cluster")
    monkeypatch.setenv(key_variable("acme-eu", "OPENAI_API_KEY"), ACME_KEY)
    settings = Settings()

    assert key_variable("acme-eu", "OPENAI_API_KEY") == "PARLEY_ORG_ACME_EU_OPENAI_API_KEY"
    assert credential_for(agent(), settings, "acme-eu") == Credential(ACME_KEY)
    assert credential_for(agent(), settings, "beta") == Credential("sk-cluster")
    assert credential_for(agent(), settings) == Credential("sk-cluster")


def test_an_organizations_own_key_is_redacted_from_errors(monkeypatch):
    monkeypatch.setenv(key_variable("acme", "OPENAI_API_KEY"), ACME_KEY)
    assert redact_keys(f"bad key {ACME_KEY}", Settings()) == "bad key [redacted]"


def test_a_reached_daily_limit_stops_naming_the_organizations_limit():
    usage = Usage(prompt_tokens=200, completion_tokens=20, cost_usd=0.5)
    bounds = org_limits_of("beta", OrgLimits(max_tokens_per_day=200), usage)

    limit = first_reached(bounds)

    assert limit is not None
    assert budget_detail(limit) == (
        "organization beta's max_tokens_per_day reached: organization beta's calls today "
        "used 220 tokens (200 prompt + 20 completion), the limit is 200")


def test_what_is_left_of_a_days_dollars_caps_the_calls():
    bounds = org_limits_of("acme", OrgLimits(max_cost_usd_per_day=1.0), Usage(cost_usd=0.25))
    assert first_reached(bounds) is None
    assert left_in(bounds).cost_usd == pytest.approx(0.75)


def test_the_days_totals_add_up_and_the_limits_round_trip_through_redis():
    redis, keys = fakeredis.FakeRedis(), Keys("t")
    add_usage(redis, keys, "acme", [Answer(agent="a", turn=1, prompt_tokens=100,
                                           completion_tokens=10, cost_usd=0.01)] * 2)
    day = redis.hgetall(keys.org_day("acme", utc_day()))
    assert usage_of(day) == Usage(prompt_tokens=200, completion_tokens=20, cost_usd=0.02)
    assert 0 < redis.ttl(keys.org_day("acme", utc_day())) <= 2 * 86_400

    write_limits(redis, keys, {"acme": OrgLimits(max_live_rooms=3)})
    assert read_limits(redis, keys, "acme") == OrgLimits(max_live_rooms=3)
    assert read_limits(redis, keys, "beta") == OrgLimits()
