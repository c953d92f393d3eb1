"""A tiny OTLP/HTTP trace receiver on loopback: what a collector would be to parley's
processes. It decodes each ExportTraceServiceRequest (protobuf) and keeps its spans."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received: its ids (hex), name, the service that sent it, attributes."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str
    attributes: dict[str, Any]


def value_of(any_value: Any) -> Any:
    """An OTLP AnyValue as a Python value."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def spans_of(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Every span of an export request, with its resource's service.name."""
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(ReceivedSpan(
                    span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                    span.name, str(resource.get("service.name", "")),
                    {a.key: value_of(a.value) for a in span.attributes}))
    return found


class OtlpReceiver:
    """Serves POST /v1/traces on 127.0.0.1 (an ephemeral port) until stopped."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.spans.extend(spans_of(request))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                """Quiet: the test reads the spans, not the requests."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL to give as OTEL_EXPORTER_OTLP_ENDPOINT."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        """Start serving on its own thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()

    def received(self) -> list[ReceivedSpan]:
        """The spans received so far."""
        with self.lock:
            return list(self.spans)
