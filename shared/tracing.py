"""OpenTelemetry tracing for every parley process, in one place: setup from the
environment, the span helpers the turn loop, the worker and the client use, and the W3C
trace context carried in Celery headers and Redis fields.

Off unless ``PARLEY_TRACING=otlp`` or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. Off, no OpenTelemetry module is imported
and every helper is a constant no-op: the hot paths pay one ``is None`` test. On, spans are
exported over OTLP (HTTP/protobuf, or gRPC when ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` is
``grpc``) with everything else the SDK reads from ``OTEL_*`` (endpoint, headers, resource
attributes, sampler). Message text and prompts are recorded only with
``PARLEY_TRACE_CONTENT=true``.
"""

from __future__ import annotations

import atexit
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from parley.shared.settings import Settings

# The variables that turn tracing on by themselves, as for any OpenTelemetry SDK.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
# The OTLP defaults, for a process whose endpoint variables are empty.
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318/v1/traces"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"
TRACEPARENT = "traceparent"
# version-trace_id-span_id-flags, lowercase hex; an all-zero id is invalid.
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
# The one span-context manager handed out while tracing is off (it holds no state).
_OFF: AbstractContextManager[None] = nullcontext()

_tracer: Any = None  # the process's tracer; None while tracing is off
_record_content = False


def wanted(settings: Settings, environ: Mapping[str, str] = os.environ) -> bool:
    """True when this process should trace: ``PARLEY_TRACING=otlp`` or an OTLP endpoint
    named the standard way."""
    return settings.tracing == "otlp" or any(environ.get(name) for name in ENDPOINT_VARIABLES)


def setup(kind: str, settings: Settings, environ: Mapping[str, str] = os.environ) -> bool:
    """Start tracing in this process (``kind``: api, coordinator, worker) when
    ``wanted``; returns whether it is on. The service name is ``parley-<kind>`` unless
    ``OTEL_SERVICE_NAME`` (or ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) says
    otherwise. Spans still queued are sent when the process exits."""
    if not wanted(settings, environ):
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")
    resource = Resource.create({} if named else {"service.name": f"parley-{kind}"})
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(exporter(environ)))
    atexit.register(provider.shutdown)
    # Global too: a library's own instrumentation then joins parley's traces.
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    install(provider, settings.trace_content)
    return True


def exporter(environ: Mapping[str, str] = os.environ) -> Any:
    """The OTLP span exporter the environment asks for: HTTP/protobuf unless the traces'
    (or every signal's) protocol is ``grpc``, which needs the ``grpc`` extra."""
    protocol = next((environ[name] for name in PROTOCOL_VARIABLES if environ.get(name)),
                    "http/protobuf")
    # An endpoint variable set but empty (compose passes them so) means the default one.
    named = any(environ.get(name) for name in ENDPOINT_VARIABLES)
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise RuntimeError("OTLP over gRPC needs the gRPC exporter: "
                               "pip install 'parley[grpc]'") from None
        return OTLPSpanExporter(endpoint=None if named else DEFAULT_GRPC_ENDPOINT)
    if protocol != "http/protobuf":
        raise RuntimeError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not supported: "
                           "http/protobuf or grpc")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )
    return HttpSpanExporter(endpoint=None if named else DEFAULT_HTTP_ENDPOINT)


def install(provider: Any, record_content: bool = False) -> None:
    """Trace through ``provider`` (a TracerProvider; tests give one with an in-memory
    exporter); None turns tracing off again."""
    global _tracer, _record_content
    _tracer = None if provider is None else provider.get_tracer("parley")
    _record_content = record_content


def on() -> bool:
    """True while this process traces."""
    return _tracer is not None


def records_content() -> bool:
    """True when spans may carry message text and prompts (``PARLEY_TRACE_CONTENT``)."""
    return _tracer is not None and _record_content


def span(name: str, attributes: Mapping[str, Any] | None = None, *, parent: str = "",
         kind: str = "internal") -> AbstractContextManager[Any]:
    """A span made current for the block (None inside while tracing is off). ``parent``
    is a W3C traceparent to continue (a run's trace kept in Redis) instead of the current
    span; ``kind``: internal, producer, consumer, client, server. An exception leaving the
    block is recorded on the span."""
    if _tracer is None:
        return _OFF
    from opentelemetry.trace import SpanKind

    context = context_of(parent) if parent else None
    return _tracer.start_as_current_span(name, context=context, kind=SpanKind[kind.upper()],
                                         attributes=clean(attributes))


def start(name: str, attributes: Mapping[str, Any] | None = None, *, parent: str = "") -> Any:
    """A span started but not made current (ended by ``end``): one that outlives the
    block that starts it, a run's. None while tracing is off."""
    if _tracer is None:
        return None
    return _tracer.start_span(name, context=context_of(parent) if parent else None,
                              attributes=clean(attributes))


def end(started: Any) -> None:
    """End a span ``start`` gave (None: nothing)."""
    if started is not None:
        started.end()


def annotate(current: Any, attributes: Mapping[str, Any]) -> None:
    """Add attributes to a span (None, tracing off: nothing); None values are left out."""
    if current is not None:
        current.set_attributes(clean(attributes))


def clean(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The attributes OpenTelemetry takes: None values left out, the others as they are
    (str, bool, int, float, or sequences of one of them)."""
    return {key: value for key, value in (attributes or {}).items() if value is not None}


def traceparent(of: Any = None) -> str:
    """The W3C traceparent of span ``of`` (default: the current span), or "" when there is
    none or tracing is off."""
    if _tracer is None:
        return ""
    from opentelemetry import trace

    context = (of or trace.get_current_span()).get_span_context()
    if not context.is_valid:
        return ""
    return (f"00-{trace.format_trace_id(context.trace_id)}-"
            f"{trace.format_span_id(context.span_id)}-{int(context.trace_flags):02x}")


def valid_traceparent(text: str | None) -> str:
    """``text`` when it is a W3C traceparent parley writes (version 00), else "": one read
    from Redis or a message header is untrusted."""
    return text if text and _TRACEPARENT.fullmatch(text) else ""


def trace_id_of(parent: str) -> str:
    """The trace id (32 hex digits) of a traceparent, "" for none."""
    return parent.split("-")[1] if valid_traceparent(parent) else ""


def context_of(parent: str) -> Any:
    """An OpenTelemetry context whose current span is the remote ``parent`` (a
    traceparent; an invalid one gives a context without a parent: a new trace)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({TRACEPARENT: valid_traceparent(parent)})


def inject(headers: dict[str, Any]) -> None:
    """Add the current span's traceparent to ``headers`` (a Celery message's), if any."""
    parent = traceparent()
    if parent:
        headers[TRACEPARENT] = parent


@contextmanager
def continued(parent: str | None) -> Iterator[None]:
    """Make the remote ``parent`` (a task header's traceparent) current for the block;
    nothing when tracing is off or there is no valid one."""
    if _tracer is None or not valid_traceparent(parent):
        yield
        return
    from opentelemetry import context

    token = context.attach(context_of(parent or ""))
    try:
        yield
    finally:
        context.detach(token)


def add_trace_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]
                  ) -> MutableMapping[str, Any]:
    """A structlog processor: ``trace_id`` and ``span_id`` of the current span, when
    tracing is on and a span is current."""
    if _tracer is None:
        return event
    parent = traceparent()
    if parent:
        _, event["trace_id"], event["span_id"], _ = parent.split("-")
    return event


def trace_url(template: str, trace_id: str) -> str:
    """``PARLEY_TRACE_URL``'s template with ``{trace_id}`` filled in ("" without either,
    or for a trace id that is not 32 hex digits: a record read back is untrusted)."""
    if not template or not _TRACE_ID.fullmatch(trace_id):
        return ""
    return template.replace("{trace_id}", trace_id)
