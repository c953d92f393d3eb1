"""An incident room's tools: read a service's logs, roll a service back."""

from __future__ import annotations

import parley


@parley.tool
def search_logs(service: str, minutes: int = 15) -> str:
    """Search a service's logs.

    Returns the matching lines of the last ``minutes``."""
    return "\n".join(f"{service}: error {n}" for n in range(minutes))


@parley.tool(approval=True)
def rollback(service: str) -> str:
    """Roll a service back to its previous release."""
    return f"{service} rolled back"
