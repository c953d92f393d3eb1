"""The tool catalog: what the live workers offer, read from their offers in Redis, and the
check that a new room names only tools some live worker offers.

Each worker publishes its own offer (``workers/tools/catalog_publisher.py``) under a key
that expires unless refreshed, listed in an index (shared/keys.py, ``{tools}:*``). A reader
takes the index's members, reads their offers in one MGET and skips those that expired:
a worker is in the catalog while its offer lives, whatever the clocks of the machines say.
Offers are validated as everything read back from Redis is; one that does not validate is
left out (and logged), never half read.
"""

from __future__ import annotations

from typing import Any

import structlog
from pydantic import BaseModel, Field, JsonValue, ValidationError

from parley.shared.keys import Keys
from parley.shared.models import SERVER_WILDCARD, RoomSpec
from parley.shared.records import decode

log = structlog.get_logger("parley.tools")

NO_TOOLS_HINT = ("start workers with PARLEY_WORKER_TOOLS (modules of @parley.tool functions) "
                 "or PARLEY_WORKER_MCP_CONFIG (MCP servers)")


class ToolsRefused(ValueError):
    """A new room's spec names a tool no live worker offers, or a tool that needs approval
    in a room without approvers; the message says which, in one line."""


class OfferedOptions(BaseModel):
    """How a tool runs, as its worker published it (workers/tools/base.py, ToolOptions)."""

    approval: bool = False
    idempotent: bool = False
    timeout_s: float = 30.0
    queue: str | None = None


class OfferedTool(BaseModel):
    """One tool of one worker's offer."""

    name: str = Field(min_length=1, max_length=400)
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    options: OfferedOptions = Field(default_factory=OfferedOptions)
    source: str = "python"


class WorkerOffer(BaseModel):
    """Everything one worker offers."""

    worker: str
    tools: list[OfferedTool] = Field(default_factory=list)
    acp_profiles: list[str] = Field(default_factory=list)  # the ACP agents it runs


class CatalogEntry(BaseModel):
    """One tool as the live workers offer it: the first of them (by id) describes it, and
    it needs approval when any of them says so (never less than one worker asks for)."""

    description: str
    parameters: dict[str, JsonValue]
    options: OfferedOptions
    workers: list[str]


def read_offers(redis: Any, keys: Keys) -> list[WorkerOffer]:
    """The offers of the live workers, by worker id."""
    workers = sorted(decode(member) for member in redis.zrange(keys.tool_workers, 0, -1))
    if not workers:
        return []
    offers = []
    for worker, raw in zip(workers, redis.mget([keys.tool_worker(w) for w in workers]),
                           strict=True):
        if raw is None:  # expired: the worker stopped refreshing it
            continue
        try:
            offers.append(WorkerOffer.model_validate_json(raw))
        except ValidationError as error:
            log.warning("tool_offer_unreadable", worker=worker, error=str(error)[:300])
    return offers


def live_workers(redis: Any, keys: Keys) -> list[str]:
    """The workers whose offer lives, tools or none."""
    return [offer.worker for offer in read_offers(redis, keys)]


def merge_offers(offers: list[WorkerOffer]) -> dict[str, CatalogEntry]:
    """Tool name to its entry, by name: a tool several workers offer is one entry listing
    them all."""
    catalog: dict[str, CatalogEntry] = {}
    for offer in offers:
        for tool in offer.tools:
            entry = catalog.get(tool.name)
            if entry is None:
                catalog[tool.name] = CatalogEntry(
                    description=tool.description, parameters=tool.parameters,
                    options=tool.options.model_copy(), workers=[offer.worker])
                continue
            entry.options.approval = entry.options.approval or tool.options.approval
            if offer.worker not in entry.workers:
                entry.workers.append(offer.worker)
    return dict(sorted(catalog.items()))


def read_catalog(redis: Any, keys: Keys) -> dict[str, CatalogEntry]:
    """Every tool a live worker offers, by name."""
    return merge_offers(read_offers(redis, keys))


def catalog_json(catalog: dict[str, CatalogEntry]) -> dict[str, Any]:
    """The catalog as ``parley tools --json`` and ``GET /tools`` give it."""
    return {"tools": [{"name": name, **entry.model_dump(mode="json")}
                      for name, entry in catalog.items()]}


def server_of(wildcard: str) -> str | None:
    """``github`` for ``github/*``; None for a tool's own name."""
    return wildcard[:-len(SERVER_WILDCARD)] if wildcard.endswith(SERVER_WILDCARD) else None


def tools_named(name: str, catalog: dict[str, CatalogEntry]) -> list[str]:
    """The catalog's tools a spec's ``name`` stands for: itself, or all of a server's."""
    server = server_of(name)
    if server is None:
        return [name] if name in catalog else []
    return [tool for tool in catalog if tool.startswith(f"{server}/")]


# Tools every worker offers, over the calling room's own state (workers/tools/task_tools.py).
BUILT_IN_TOOLS = ("task_status", "cancel_task")


def check_offered(spec: RoomSpec, catalog: dict[str, CatalogEntry]) -> None:
    """Raise ToolsRefused unless every tool the spec's agents name is offered by a live
    worker, and a room whose agents may call a tool that needs approval has approvers."""
    for agent in spec.callers:
        for name in agent.tools:
            if name in BUILT_IN_TOOLS:
                continue
            offered = tools_named(name, catalog)
            if not offered:
                raise ToolsRefused(unoffered(agent.name, name))
            needing = next((tool for tool in offered if catalog[tool].options.approval), None)
            if needing is not None and not spec.approvers:
                raise ToolsRefused(
                    f"agent {agent.name!r} may call tool {needing!r}, which needs a person's "
                    "approval, and the room has no approvers: name who may approve in "
                    "approvers")


def unoffered(agent: str, name: str) -> str:
    """Why an agent's tool is refused: no live worker offers it."""
    server = server_of(name)
    if server is not None:
        return (f"agent {agent!r} names tool {name!r}, but no live worker offers a tool of "
                f"server {server!r} (see parley tools)")
    return f"agent {agent!r} names tool {name!r}, which no live worker offers (see parley tools)"


def offered_profiles(offers: list[WorkerOffer]) -> dict[str, list[str]]:
    """ACP profile to the live workers that run it, by name."""
    profiles: dict[str, list[str]] = {}
    for offer in offers:
        for profile in offer.acp_profiles:
            profiles.setdefault(profile, []).append(offer.worker)
    return dict(sorted(profiles.items()))


def check_profiles(spec: RoomSpec, profiles: dict[str, list[str]]) -> None:
    """Raise ToolsRefused unless a live worker runs the ACP profile of each ACP agent."""
    for agent in spec.callers:
        if agent.is_acp and agent.acp_profile not in profiles:
            raise ToolsRefused(
                f"agent {agent.name!r} runs ACP profile {agent.acp_profile!r}, which no live "
                "worker runs (start workers with PARLEY_WORKER_ACP_CONFIG naming it)")
