"""OpenTelemetry spans for the requests Triton traces: one backend span per request, a child of Triton's model span,
from `execute()` until the final response is sent, with the GenAI semantic-convention attributes.

Tracing follows Triton's own settings: with `--trace-config mode=opentelemetry` a request Triton traces (its
context reaches the model as a W3C `traceparent`) gets a backend span, and vLLM's `llm_request` span becomes that
span's child through `trace_headers`. A request Triton does not trace gets nothing, and a server not in
OpenTelemetry mode builds no tracer at all: no exporter thread, no span objects. The exporter is the SDK's OTLP
exporter, configured by the standard OTEL_* variables; without them it sends to Triton's own `opentelemetry,url`.
Health incidents (unhealthy → restarts → recovered) are traces of their own, whenever tracing is on.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..common.server_flags import trace_config

VLLM_SERVICE_NAME = "vllm"  # vLLM's tracer names its service only through OTEL_SERVICE_NAME
TRITON_DEFAULT_URL = "http://localhost:4318/v1/traces"  # opentelemetry-cpp's default, as Triton uses it
QUEUE_SIZE = 2048  # spans held for export at most; beyond that the SDK drops them rather than block serving


@dataclass(frozen=True)
class TraceSettings:
    endpoint: str  # OTLP/HTTP traces URL

    @classmethod
    def from_server(cls, argv: list[str], env: Mapping[str, str] = os.environ) -> TraceSettings | None:
        """None unless tritonserver traces in OpenTelemetry mode."""
        config = trace_config(argv)
        if config.get("mode") != "opentelemetry":
            return None
        endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or
                    (env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
                     if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") else None) or
                    config.get("opentelemetry,url") or TRITON_DEFAULT_URL)
        return cls(endpoint)


def reachable(url: str, timeout_s: float = 1.0) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 4318), timeout=timeout_s):
            return True
    except OSError:
        return False


class _CountingExporter:
    """Wraps the OTLP exporter: spans it could not deliver are counted, never raised into serving."""

    def __init__(self, inner: Any, on_dropped: Callable[[int], None]) -> None:
        self._inner, self._on_dropped = inner, on_dropped

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter bug must not end the export thread
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._on_dropped(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class RequestSpan:
    """One request's span; every method is safe to call in any order and more than once.

    Before the request ends only two things touch the SDK: starting the span and naming it in vLLM's headers. Its
    name, attributes and events (each with the time it happened) are plain data until end() writes them: the SDK's
    per-call work — attribute checks, locks, event objects — would otherwise sit on the paths every request of a
    burst passes in turn (execute(), the engine loop's admissions, the response thread's first sends) and delay
    every request behind a traced one."""

    def __init__(self, span: Any, attributes: Mapping[str, Any]) -> None:
        self._span = span
        self._name: str | None = None
        self._attributes: dict[str, Any] = {}
        self._events: list[tuple[str, int]] = []
        self._ended = False
        self.set(attributes)

    def headers(self) -> dict[str, str]:
        """W3C trace context naming this span: vLLM's `trace_headers`, so its span is this one's child."""
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier

    def ids(self) -> tuple[int, int]:
        """(trace id, span id), as exemplars carry them."""
        context = self._span.get_span_context()
        return context.trace_id, context.span_id

    def rename(self, name: str) -> None:
        self._name = name

    def set(self, attributes: Mapping[str, Any]) -> None:
        self._attributes.update((k, v) for k, v in attributes.items() if v is not None)

    def event(self, name: str) -> None:
        self._events.append((name, time.time_ns()))

    def end(self, outcome: str, error: str | None = None) -> None:
        if self._ended:
            return
        from opentelemetry.trace import Status, StatusCode

        self._ended = True
        if self._name is not None:
            self._span.update_name(self._name)
        self._span.set_attributes({**self._attributes, "vllm_triton.outcome": outcome})
        for name, at_ns in self._events:
            self._span.add_event(name, timestamp=at_ns)
        if error is not None:
            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.add_event("final response sent")
        self._span.end()


class RequestTracer:
    """The backend's tracer provider (its own, not the global one vLLM sets) and the spans it starts."""

    def __init__(self, settings: TraceSettings, resource: Mapping[str, str],
                 on_dropped: Callable[[int], None], log_warn: Callable[[str], None], service_name: str) -> None:
        import logging

        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.settings = settings
        if not reachable(settings.endpoint):
            log_warn(f"tracing: no OTLP receiver answers at {settings.endpoint}; serving goes on and spans that "
                     "cannot be delivered are counted in vllm_triton_trace_spans_dropped_total")
        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)  # counted instead of logged
        self._resource = dict(resource)  # the model's name under the attribute the dashboards' trace links query
        self.provider = TracerProvider(resource=Resource.create(
            {"service.name": service_name, **resource}))
        exporter = _CountingExporter(OTLPSpanExporter(endpoint=settings.endpoint), on_dropped)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=QUEUE_SIZE,
                                                            schedule_delay_millis=500))
        self._tracer = self.provider.get_tracer("vllm_triton_observable")

    def start(self, triton_context: str | None, name: str, attributes: Mapping[str, Any]) -> RequestSpan | None:
        """A span for a request Triton traces (its context JSON carries `traceparent`); None for the others."""
        carrier = _carrier(triton_context)
        if carrier is None:
            return None
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = TraceContextTextMapPropagator().extract(carrier)
        return RequestSpan(self._tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL), attributes)

    def incidents(self, model: str) -> IncidentTrace:
        return IncidentTrace(self._tracer, model, self._resource)

    def shutdown(self) -> None:
        self.provider.shutdown()


class IncidentTrace:
    """Health incidents as traces (the health room's `Incidents`): one root span per incident, from unhealthy to
    recovered or given up — its length is the downtime — with a child span per restart attempt, so an operator
    sees the outage, each restart and its cost beside the requests that failed in it."""

    def __init__(self, tracer: Any, model: str, attributes: Mapping[str, str]) -> None:
        self._tracer, self._model, self._attributes = tracer, model, dict(attributes)
        self._incident: Any = None
        self._restart: Any = None
        self._lock = threading.Lock()

    def unhealthy(self, cause: str) -> None:
        from opentelemetry.context import Context

        with self._lock:
            if self._incident is None:
                self._incident = self._tracer.start_span(
                    f"engine incident {self._model}", context=Context(),
                    attributes={**self._attributes, "vllm_triton.health.cause": cause})
            self._incident.add_event("unhealthy", {"cause": cause})

    def restart_started(self, attempt: int, attempts: int, backoff_s: float) -> None:
        from opentelemetry import trace

        with self._lock:
            if self._incident is None:
                return
            self._restart = self._tracer.start_span(
                "engine restart", context=trace.set_span_in_context(self._incident),
                attributes={"vllm_triton.restart.attempt": attempt, "vllm_triton.restart.max_attempts": attempts,
                            "vllm_triton.restart.backoff_s": backoff_s})

    def restart_ended(self, error: str | None) -> None:
        with self._lock:
            self._end_restart(error)

    def recovered(self, cause: str) -> None:
        self._end("recovered", cause, error=None)

    def not_recovered(self, action: str) -> None:
        self._end("not recovered", action, error=action)

    def stopped(self) -> None:
        self._end("model unloaded", "the monitor stopped with the engine still unhealthy",
                  error="unloaded while unhealthy")

    def _end_restart(self, error: str | None) -> None:
        span, self._restart = self._restart, None
        if span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def _end(self, event: str, detail: str, error: str | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        with self._lock:
            span, self._incident = self._incident, None
            if span is None:
                return
            self._end_restart(error)
            span.add_event(event, {"detail": detail})
            span.set_attribute("vllm_triton.health.outcome", event)
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
            span.end()


def _carrier(triton_context: str | None) -> dict[str, str] | None:
    if not triton_context:
        return None
    try:
        carrier = json.loads(triton_context)
    except ValueError:
        return None
    return carrier if isinstance(carrier, dict) and isinstance(carrier.get("traceparent"), str) else None
