"""Tracing's pure logic: when it is on and where spans go (from tritonserver's flags and OTEL_* variables), which
requests get a span, and what a request's and an incident's spans say."""

import json

from vllm_triton_observable.backend.trace_attributes import trace_context
from vllm_triton_observable.common.server_flags import trace_config
from vllm_triton_observable.tracing.spans import TraceSettings

OTEL = ["tritonserver", "--trace-config", "mode=opentelemetry",
        "--trace-config=opentelemetry,url=http://collector:4318/v1/traces", "--trace-config", "rate=1"]


def test_trace_config_reads_every_form():
    assert trace_config(OTEL) == {"mode": "opentelemetry", "opentelemetry,url": "http://collector:4318/v1/traces",
                                  "rate": "1"}


def test_tracing_is_on_only_in_opentelemetry_mode_with_the_sdk_on():
    assert TraceSettings.from_server(["tritonserver"], env={}) is None
    assert TraceSettings.from_server(["tritonserver", "--trace-config", "mode=triton"], env={}) is None
    assert TraceSettings.from_server(OTEL, env={}).endpoint == "http://collector:4318/v1/traces"
    assert TraceSettings.from_server(OTEL[:3], env={}).endpoint == "http://localhost:4318/v1/traces"
    assert TraceSettings.from_server(OTEL, env={"OTEL_SDK_DISABLED": " TRUE "}) is None  # as the SDK reads it
    assert TraceSettings.from_server(OTEL, env={"OTEL_SDK_DISABLED": "false"}) is not None


def test_the_standard_otel_variables_win():
    assert TraceSettings.from_server(OTEL, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318/"}
                                     ).endpoint == "http://otel:4318/v1/traces"
    assert TraceSettings.from_server(OTEL, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318",
                                                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/x"}
                                     ).endpoint == "http://t:9/x"


def test_only_requests_triton_traces_get_a_span(dead_port_tracer):
    warnings = []
    tracer = dead_port_tracer(log_warn=warnings.append)
    assert "no OTLP receiver answers" in warnings[0]  # said once, at load
    assert tracer.start(None, "x", {}) is None
    assert tracer.start("not json", "x", {}) is None
    assert tracer.start('{"other": 1}', "x", {}) is None
    span = tracer.start('{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}', "x",
                        {"a": 1, "skipped": None})
    assert span.headers()["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    span.end("completed")
    span.end("completed")  # a second end is harmless


class _View:
    """What the stub tells of a request: Triton's trace context (None when Triton does not trace it) and the
    request's parameters as JSON."""

    def __init__(self, triton_context, parameters):
        self.trace_context = lambda: triton_context
        self.parameters = lambda: parameters


def test_a_request_triton_did_not_trace_continues_the_client_trace_that_triton_forwarded():
    """Triton's context first (the backend span is a child of Triton's); without it, the `traceparent` header
    Triton forwarded as a request parameter (its gRPC frontend loses some contexts it should trace)."""
    triton = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    forwarded = '{"max_tokens": 4, "traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}'
    assert trace_context(_View(triton, forwarded)) == triton
    assert trace_context(_View(None, forwarded)) == forwarded
    assert trace_context(_View("", forwarded)) == forwarded
    assert trace_context(_View(None, '{"max_tokens": 4}')) is None
    assert trace_context(_View(None, "{}")) is None


def test_a_forwarded_client_context_makes_the_span_a_child_of_the_client_span(dead_port_tracer):
    tracer = dead_port_tracer()
    records = []
    tracer.exporter.submit = records.append
    forwarded = '{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "tracestate": "k=v"}'
    tracer.start(trace_context(_View(None, forwarded)), "x", {}).end("completed")
    (done,) = records
    assert done.trace_id == 0x11111111111111111111111111111111 and done.parent == (0x2222222222222222, True)
    assert done.trace_state == "k=v"
    unsampled = forwarded.replace('-01"', '-00"')
    assert tracer.start(trace_context(_View(None, unsampled)), "x", {}) is None  # the client's "not sampled" holds


def test_a_malformed_forwarded_context_gets_no_span_not_a_trace_of_its_own(dead_port_tracer):
    """Triton ignores a `traceparent` it cannot parse; the backend, which reads the forwarded header itself, does
    too: the request is served untraced rather than under a root trace nobody asked for."""
    tracer = dead_port_tracer()
    for bad in ["garbage", "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
                "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
                "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # the forbidden version
                "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"]:  # upper case
        forwarded = json.dumps({"max_tokens": 4, "traceparent": bad})
        assert tracer.start(trace_context(_View(None, forwarded)), "x", {}) is None, bad
    assert tracer.start(trace_context(_View(None, '{"traceparent": 5}')), "x", {}) is None  # not a string
    # a tracestate that is not text is left out; the valid parent still traces the request
    forwarded = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": 5}'
    span = tracer.start(trace_context(_View(None, forwarded)), "x", {})
    assert span.headers()["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    assert "tracestate" not in span.headers()


def test_a_request_span_is_one_record_at_its_end_with_each_event_at_its_own_time(dead_port_tracer):
    """Name, attributes and events wait as plain data until end() (no SDK span: its per-call work stays off the
    paths a burst of requests passes in turn), and the record still says when each event happened; it is the child
    of Triton's span, and the parent of vLLM's (its headers name it)."""
    import time

    from opentelemetry.trace import SpanKind, StatusCode

    tracer = dead_port_tracer()
    records = []
    tracer.exporter.submit = records.append
    span = tracer.start('{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", '
                        '"tracestate": "vendor=x"}', "text_completion", {"a": 1, "skipped": None})
    span.rename("text_completion m")
    span.set({"b": "two", "none": None})
    span.event("first token")
    first_token_ns = time.time_ns()
    time.sleep(0.01)
    assert records == []  # nothing until the request ends
    span.end("failed", "bad input")
    span.end("failed", "bad input")  # a second end is harmless
    (done,) = records
    assert done.name == "text_completion m" and done.kind == SpanKind.INTERNAL.value
    assert done.trace_id == 0x0af7651916cd43dd8448eb211c80319c and done.parent == (0xb7ad6b7169203331, True)
    assert span.ids() == (done.trace_id, done.span_id) and done.span_id != 0
    assert span.headers() == {"traceparent": f"00-0af7651916cd43dd8448eb211c80319c-{done.span_id:016x}-01",
                              "tracestate": "vendor=x"} and done.trace_state == "vendor=x"
    assert done.attributes == {"a": 1, "b": "two", "vllm_triton.outcome": "failed"}
    assert [event[0] for event in done.events] == ["first token", "final response sent"]
    assert done.start_ns <= done.events[0][1] <= first_token_ns < done.events[1][1] - 5_000_000
    assert done.events[1][1] == done.end_ns
    assert done.status == StatusCode.ERROR.value and done.description == "bad input"


def test_an_unsampled_context_gets_no_span(dead_port_tracer):
    assert dead_port_tracer().start(
        '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}', "x", {}) is None


def test_a_health_incident_is_one_trace_with_a_span_per_restart_attempt():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from vllm_triton_observable.tracing.spans import IncidentTrace

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    incidents = IncidentTrace(provider.get_tracer("test"), "m", {"triton.model_name": "m"})
    incidents.restart_ended(None)  # nothing open: nothing happens
    incidents.unhealthy("the engine is dead: gone")
    incidents.restart_started(1, 2, 5.0)
    incidents.restart_ended("RuntimeError: no memory")
    incidents.restart_started(2, 2, 10.0)
    incidents.restart_ended(None)
    incidents.recovered("engine restarted in place (attempt 2)")
    incidents.stopped()  # nothing open any more
    first, second, incident = exporter.get_finished_spans()
    assert incident.name == "engine incident m" and incident.parent is None
    assert {s.context.trace_id for s in (first, second)} == {incident.context.trace_id}
    assert first.parent.span_id == second.parent.span_id == incident.context.span_id
    assert first.status.status_code is StatusCode.ERROR and second.status.status_code is StatusCode.UNSET
    assert first.attributes["vllm_triton.restart.attempt"] == 1
    assert second.attributes["vllm_triton.restart.backoff_s"] == 10
    assert [e.name for e in incident.events] == ["unhealthy", "recovered"]
    assert incident.attributes["vllm_triton.health.outcome"] == "recovered"
    assert incident.attributes["triton.model_name"] == "m"
    assert incident.status.status_code is StatusCode.UNSET

    incidents.unhealthy("stalled")
    incidents.restart_started(1, 1, 5.0)
    incidents.stopped()  # unloaded mid-restart: both end, with ERROR
    restart, incident = exporter.get_finished_spans()[3:]
    assert restart.status.status_code is incident.status.status_code is StatusCode.ERROR
    assert incident.attributes["vllm_triton.health.outcome"] == "model unloaded"
