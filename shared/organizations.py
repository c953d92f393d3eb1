"""Organizations: who a room belongs to, each organization's daily limits, and its totals
per UTC day.

A room's ``organization`` is set when it is created and never changes; rooms created
without one belong to ``default``, so a single-tenant cluster runs as before. The limits
come from the API's tokens file (parley.api.access), which writes them to Redis whenever it
loads the file: the coordinators read them from there and never need the file themselves.
The day's totals are counted by the workers as answers land.
"""

from __future__ import annotations

import re
import time
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from parley.shared.keys import Keys
from parley.shared.models import DEFAULT_ORGANIZATION, Answer, Usage
from parley.shared.records import decode, usage_from

__all__ = ["DEFAULT_ORGANIZATION", "OrgLimits", "check_organization"]
# Lower case, so that an organization's key variable (PARLEY_ORG_<ORG>_...) names one only.
_ORGANIZATION = re.compile(r"[a-z0-9][a-z0-9_\-]{0,63}\Z")
ORG_KEY_PREFIX = "PARLEY_ORG_"
# A day's totals are read until the day is over everywhere, then dropped.
DAY_TTL_S = 2 * 86_400


class OrgLimits(BaseModel):
    """An organization's limits (each None: no limit)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_live_rooms: int | None = Field(default=None, ge=0)
    max_tokens_per_day: int | None = Field(default=None, ge=0)
    max_cost_usd_per_day: float | None = Field(default=None, ge=0)

    def daily(self) -> bool:
        """True when a daily limit is set."""
        return self.max_tokens_per_day is not None or self.max_cost_usd_per_day is not None


class RoomLimitReached(ValueError):
    """A room refused at create: its organization has max_live_rooms rooms already."""


def check_organization(name: str) -> str:
    """Return ``name`` if it can name an organization, else raise ValueError saying why."""
    if not _ORGANIZATION.fullmatch(name):
        raise ValueError(f"invalid organization {name!r}: use 1-64 lower-case letters, "
                         "digits, '_' or '-', starting with a letter or digit")
    return name


def key_variable(organization: str, variable: str) -> str:
    """The variable holding an organization's own value of the key ``variable`` names:
    ``PARLEY_ORG_ACME_OPENAI_API_KEY``."""
    return f"{ORG_KEY_PREFIX}{organization.upper().replace('-', '_')}_{variable}"


def utc_day(at: float | None = None) -> str:
    """The UTC day of ``at`` (now by default) as ``YYYY-MM-DD``."""
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if at is None else at))


def write_limits(redis: Any, keys: Keys, limits: dict[str, OrgLimits]) -> None:
    """Replace every organization's limits in Redis with ``limits``, in one transaction."""
    pipe = redis.pipeline(transaction=True)
    pipe.delete(keys.org_limits)
    if limits:
        pipe.hset(keys.org_limits, mapping={org: limit.model_dump_json()
                                            for org, limit in limits.items()})
    pipe.execute()


def parse_limits(raw: bytes | str | None) -> OrgLimits:
    """One organization's limits as stored (none stored: no limits)."""
    return OrgLimits.model_validate(orjson.loads(raw)) if raw else OrgLimits()


def read_limits(redis: Any, keys: Keys, organization: str) -> OrgLimits:
    """The organization's limits, as the API last loaded them."""
    return parse_limits(redis.hget(keys.org_limits, organization))


def add_usage(redis: Any, keys: Keys, organization: str, answers: list[Answer]) -> None:
    """Count the answers' tokens and cost in the organization's totals of today."""
    usage = {name: sum(getattr(answer, name) for answer in answers)
             for name in ("prompt_tokens", "completion_tokens", "cost_usd")}
    if not any(usage.values()):
        return
    key = keys.org_day(organization, utc_day())
    pipe = redis.pipeline(transaction=False)
    pipe.hincrby(key, "prompt_tokens", int(usage["prompt_tokens"]))
    pipe.hincrby(key, "completion_tokens", int(usage["completion_tokens"]))
    pipe.hincrbyfloat(key, "cost_usd", float(usage["cost_usd"]))
    pipe.expire(key, DAY_TTL_S)
    pipe.execute()


def usage_of(fields: dict[Any, Any]) -> Usage:
    """A day's totals hash as Usage."""
    return usage_from({decode(k): decode(v) for k, v in fields.items()})
