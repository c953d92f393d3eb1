"""The what-if route: a room's recorded run decided again under other policy settings,
the same JSON as ``parley replay --json``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from parley.api.rooms import ClientDep
from parley.coordinator.policies.what_if import NotReplayable, parse_settings

router = APIRouter(tags=["what-if"])


@router.get("/rooms/{room}/replay")
def replay(room: str, request: Request, client: ClientDep) -> dict[str, Any]:
    """Every query parameter but ``run`` is a setting to replay under
    (``?threshold=0.7&recency_penalty=0.5``); ``run`` picks the run (the newest by default).
    400 naming a setting that cannot be replayed."""
    params = request.query_params
    run = params.get("run")
    if run is not None and not run.isdigit():
        raise NotReplayable(f"run {run!r} is not a run number")
    pairs = [f"{name}={value}" for name, value in params.multi_items() if name != "run"]
    return client.replay(room, parse_settings(pairs), int(run) if run else None).as_json()
