"""The API process's own metrics (prometheus_client, default registry), served at
/metrics beside the process and platform collectors."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("parley_api_requests_total", "HTTP requests answered by the API",
                   ["route", "method", "status"])
REQUEST_SECONDS = Histogram("parley_api_request_seconds",
                            "Time to answer an HTTP request (event streams left out)",
                            ["route", "method"],
                            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                     1.0, 2.5, 5.0, 10.0))
SSE_STREAMS = Gauge("parley_api_sse_streams", "Server-sent event streams open now", ["route"])
SSE_EVENTS = Counter("parley_api_sse_events_total", "Events sent on server-sent event streams",
                     ["route"])
