"""Room specs for tests, built from compact scripts."""

from __future__ import annotations

from typing import Any

from parley.shared.models import RoomSpec


def scripted_spec(scripts: dict[str, list[dict[str, Any]]], queue: str = "parley.agents",
                  **policy: Any) -> RoomSpec:
    """A bid room whose agents (in dict order) replay the given scripts."""
    return RoomSpec.model_validate({
        "name": "test-room",
        "policy": {"kind": "bid", **policy},
        "agents": [{"name": name, "model": "scripted", "script": script, "queue": queue}
                   for name, script in scripts.items()],
    })


def rotating_scripts(agents: int, turns: int, sleep: float = 0.0) -> dict[str, list[dict[str, Any]]]:
    """On turn t agent t mod N bids 0.9 and the rest 0.2: every turn has a known winner."""
    names = [f"agent{i}" for i in range(agents)]
    return {
        name: [
            {"score": 0.9 if t % agents == i else 0.2, "message": f"{name} on turn {t}",
             "sleep": sleep}
            for t in range(1, turns + 1)
        ]
        for i, name in enumerate(names)
    }


def investigator_room(name: str, queue: str, investigator: dict[str, Any],
                      call_timeout_s: float = 30) -> RoomSpec:
    """A selector room whose scripted selector picks the Investigator (``investigator``:
    its model, script and tools), then ends the run; Bob stays silent."""
    return RoomSpec.model_validate({
        "name": name,
        "policy": {"kind": "selector", "max_turns": 2, "call_timeout_s": call_timeout_s,
                   "selector": {"model": "scripted", "queue": queue,
                                "script": [{"content": "Investigator"},
                                           {"content": "TERMINATE"}]}},
        "agents": [{"name": "Investigator", "queue": queue, **investigator},
                   {"name": "Bob", "model": "scripted", "queue": queue, "script": []}],
    })
