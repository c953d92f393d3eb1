"""The API process's own metrics, served at /metrics with the process and platform
collectors. They live in a registry of their own: the API imports the coordinator's turn
code (for turn reports), which registers the coordinators' and workers' metrics in the
default registry, and those would only ever read zero here."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

REQUESTS = Counter("parley_api_requests_total", "HTTP requests answered by the API",
                   ["route", "method", "status"], registry=REGISTRY)
REQUEST_SECONDS = Histogram("parley_api_request_seconds",
                            "Time to answer an HTTP request (event streams left out)",
                            ["route", "method"],
                            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                     1.0, 2.5, 5.0, 10.0), registry=REGISTRY)
SSE_STREAMS = Gauge("parley_api_sse_streams", "Server-sent event streams open now", ["route"],
                    registry=REGISTRY)
SSE_EVENTS = Counter("parley_api_sse_events_total", "Events sent on server-sent event streams",
                     ["route"], registry=REGISTRY)
REFUSED = Counter("parley_api_refused_total",
                  "Requests and connections refused before any route saw them, by reason "
                  "(framing, host, origin, content_type, token, role, too_many_connections, "
                  "header_timeout, body_timeout)", ["reason"], registry=REGISTRY)
