"""OpenTelemetry spans for the requests Triton traces: one backend span per request, a child of Triton's model span,
from `execute()` until the final response is sent, with the GenAI semantic-convention attributes.

Tracing follows Triton's own settings: with `--trace-config mode=opentelemetry` a request Triton traces (its
context reaches the model as a W3C `traceparent`) gets a backend span, and vLLM's `llm_request` span becomes that
span's child through `trace_headers`; so does one whose client's `traceparent` Triton forwarded to the model
where Triton lost it (backend/trace_attributes.py). A request with neither gets nothing, and a server not in
OpenTelemetry mode builds no tracer at all: no exporter, no span objects. The exporter is the SDK's OTLP exporter,
in a process of its own (tracing/export_process.py: the stub keeps only a copy of each finished span), configured by
the standard OTEL_* variables; without them it sends to Triton's own `opentelemetry,url`.
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
from .span_record import SpanRecord

VLLM_SERVICE_NAME = "vllm"  # vLLM's tracer names its service only through OTEL_SERVICE_NAME
TRITON_DEFAULT_URL = "http://localhost:4318/v1/traces"  # opentelemetry-cpp's default, as Triton uses it
SCOPE = "vllm_triton_observable"  # the instrumentation scope of the backend's spans


@dataclass(frozen=True)
class TraceSettings:
    endpoint: str  # OTLP/HTTP traces URL

    @classmethod
    def from_server(cls, argv: list[str], env: Mapping[str, str] = os.environ) -> TraceSettings | None:
        """None unless tritonserver traces in OpenTelemetry mode and the OpenTelemetry SDK is on."""
        config = trace_config(argv)
        if config.get("mode") != "opentelemetry" or sdk_disabled(env):
            return None
        endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or
                    (env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
                     if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") else None) or
                    config.get("opentelemetry,url") or TRITON_DEFAULT_URL)
        return cls(endpoint)


def sdk_disabled(env: Mapping[str, str]) -> bool:
    """`OTEL_SDK_DISABLED=true`, as the Python SDK reads it: its tracer providers, vLLM's as well as the backend's,
    hand out no-op tracers, so Triton's own spans are all there is; the backend then builds no tracer at all (no
    export process, no span objects) and gives vLLM no endpoint."""
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def reachable(url: str, timeout_s: float = 1.0) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 4318), timeout=timeout_s):
            return True
    except OSError:
        return False


class RequestSpan:
    """One request's span, as plain data from `execute()` to its final response; every method is safe to call in
    any order and more than once.

    It is not an SDK span: the SDK's per-span work — span objects, attribute cleaning, event objects, locks — cost
    ≈ 0.15 ms of the stub's Python per request on the CPU machine, on the paths every request of a burst passes in
    turn (execute(), the engine loop's admissions, the response thread's sends) and on the GIL they share. Its ids
    come from the provider's id generator and its sampling from the provider's sampler, as an SDK span's would; its
    name, attributes and events (each with the time it happened) become one SpanRecord at end(), which the export
    process turns into the OTLP span the SDK would have sent."""

    def __init__(self, submit: Callable[[SpanRecord], None], trace_id: int, span_id: int, flags: int,
                 trace_state: str, parent_span_id: int, name: str, attributes: Mapping[str, Any]) -> None:
        self._submit = submit
        self._trace_id, self._span_id, self._flags, self._trace_state = trace_id, span_id, flags, trace_state
        self._parent_span_id = parent_span_id
        self._name = name
        self._start_ns = time.time_ns()
        self._attributes: dict[str, Any] = {}
        self._events: list[tuple[str, int, dict[str, Any]]] = []
        self._ended = False
        self.set(attributes)

    def headers(self) -> dict[str, str]:
        """W3C trace context naming this span: vLLM's `trace_headers`, so its span is this one's child."""
        carrier = {"traceparent": f"00-{self._trace_id:032x}-{self._span_id:016x}-{self._flags:02x}"}
        if self._trace_state:
            carrier["tracestate"] = self._trace_state
        return carrier

    def ids(self) -> tuple[int, int]:
        """(trace id, span id), as exemplars carry them."""
        return self._trace_id, self._span_id

    def rename(self, name: str) -> None:
        self._name = name

    def set(self, attributes: Mapping[str, Any]) -> None:
        self._attributes.update((k, v) for k, v in attributes.items() if v is not None)

    def event(self, name: str) -> None:
        self._events.append((name, time.time_ns(), {}))

    def end(self, outcome: str, error: str | None = None) -> None:
        if self._ended:
            return
        from opentelemetry.trace import SpanKind, StatusCode

        self._ended = True
        end_ns = time.time_ns()
        self._submit(SpanRecord(
            self._name, self._trace_id, self._span_id, self._flags, self._trace_state,
            (self._parent_span_id, True), SpanKind.INTERNAL.value,
            self._start_ns, end_ns, {**self._attributes, "vllm_triton.outcome": outcome},
            [*self._events, ("final response sent", end_ns, {})],
            (StatusCode.ERROR if error is not None else StatusCode.UNSET).value, error, (SCOPE, None)))


class RequestTracer:
    """The backend's tracer provider (its own, not the global one vLLM sets) and the spans it starts; its spans are
    exported by a process of their own."""

    def __init__(self, settings: TraceSettings, resource: Mapping[str, str],
                 on_dropped: Callable[[int], None], log_warn: Callable[[str], None], service_name: str) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.trace import TraceFlags
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from .export_process import ExportProcess

        self.settings = settings
        if not reachable(settings.endpoint):
            log_warn(f"tracing: no OTLP receiver answers at {settings.endpoint}; serving goes on and spans that "
                     "cannot be delivered are counted in vllm_triton_trace_spans_dropped_total")
        self._resource = dict(resource)  # the model's name under the attribute the dashboards' trace links query
        self.provider = TracerProvider(resource=Resource.create(
            {"service.name": service_name, **resource}))
        self.exporter = ExportProcess(settings.endpoint, self.provider.resource.attributes, on_dropped, log_warn)
        self.provider.add_span_processor(self.exporter)
        self._tracer = self.provider.get_tracer(SCOPE)
        self._propagator = TraceContextTextMapPropagator()
        # W3C Trace Context Level 2's "random trace id" flag, which the SDK keeps from the parent where it has it
        # (TraceFlags.RANDOM_TRACE_ID, in recent opentelemetry-api); with older releases the SDK's spans and this
        # tracer's alike carry only "sampled". A request span always has a parent, so its trace id is never new.
        self._random_flag = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)

    def start(self, triton_context: str | None, name: str, attributes: Mapping[str, Any]) -> RequestSpan | None:
        """A span for a request whose trace context (JSON: Triton's, or the parameters that carry the client's
        forwarded `traceparent`) holds a valid parent the provider's sampler samples (by default: a sampled one);
        None for the others. Never a root span: a request Triton does not trace and the client sent no valid
        context for is not traced."""
        carrier = _carrier(triton_context)
        if carrier is None:
            return None
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, TraceFlags

        context = self._propagator.extract(carrier)
        parent = trace.get_current_span(context).get_span_context()
        if not parent.is_valid:  # a malformed client `traceparent`, forwarded: Triton ignores it, and so does this
            return None
        sampling = self.provider.sampler.should_sample(context, parent.trace_id, name, SpanKind.INTERNAL)
        if not sampling.decision.is_sampled():
            return None
        flags = TraceFlags.SAMPLED | (self._random_flag & parent.trace_flags)
        trace_state = sampling.trace_state.to_header() if sampling.trace_state else ""
        return RequestSpan(self.exporter.submit, parent.trace_id, self.provider.id_generator.generate_span_id(),
                           flags, trace_state, parent.span_id, name, {**(sampling.attributes or {}), **attributes})

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
    if not isinstance(carrier, dict) or not isinstance(carrier.get("traceparent"), str):
        return None
    # only text reaches the propagator: a forwarded request parameter may be a number (it raises on one)
    return {key: value for key, value in carrier.items() if isinstance(value, str)}
