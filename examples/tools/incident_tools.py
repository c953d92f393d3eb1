"""Tools of the incident example room (examples/rooms/tools.yaml): canned answers, so the
room runs offline. A worker offers them with
``PARLEY_WORKER_TOOLS=examples.tools.incident_tools``."""

from __future__ import annotations

import parley

LOGS = {
    "checkout": [
        "12:01:07 ERROR checkout-api upstream payments timed out after 3000ms",
        "12:01:09 ERROR checkout-api upstream payments timed out after 3000ms",
        "12:01:15 WARN  checkout-api retry budget exhausted for payments",
    ],
}
DEPLOYS = {"checkout": "checkout-api v2.14.0 deployed at 11:58 (payments client 4.2 -> 5.0)"}


@parley.tool(idempotent=True, timeout_s=5)
def search_logs(service: str, lines: int = 20) -> str:
    """The service's most recent error and warning log lines."""
    found = LOGS.get(service, [])[-lines:]
    return "\n".join(found) if found else f"no log lines for {service}"


@parley.tool(idempotent=True, timeout_s=5)
def last_deploy(service: str) -> str:
    """What was last deployed for the service, and when."""
    return DEPLOYS.get(service, f"no deploy of {service} on record")
