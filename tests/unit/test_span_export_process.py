"""The span exporter's own process: what it sends is what an exporter in the stub would have sent, and spans it
cannot deliver are counted, never raised — in its loop, and with the real process against a port nobody serves."""

from __future__ import annotations

import io
import pickle
import time

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from vllm_triton_observable.tracing.export_process import export_batches, readable_span, span_record

RESOURCE = Resource.create({"service.name": "test", "triton.model_name": "m"})
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def finished_spans() -> list:
    """Spans as the backend makes them: a child of a remote parent (with a trace state) with attributes of every
    kind, timed events and an error status; a root span with an attributed event; an unset status."""
    exporter, provider = InMemorySpanExporter(), TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("vllm_triton_observable", "0.1.0")
    parent = TraceContextTextMapPropagator().extract({"traceparent": PARENT, "tracestate": "vendor=x"})
    span = tracer.start_span("text_completion m", context=parent, kind=SpanKind.INTERNAL)
    span.set_attributes({"s": "text", "i": 7, "f": 0.5, "b": True, "list": ["length", "stop"], "ints": [1, 2]})
    span.add_event("first token", timestamp=time.time_ns())
    span.add_event("final response sent")
    span.set_status(Status(StatusCode.ERROR, "bad input"))
    span.end()
    root = tracer.start_span("engine incident m")
    root.add_event("unhealthy", {"cause": "stalled"})
    root.end()
    return list(exporter.get_finished_spans())


def test_a_rebuilt_span_encodes_as_the_original():
    spans = finished_spans()
    assert spans[0].context.trace_state == TraceState([("vendor", "x")]) and spans[0].parent.is_remote
    rebuilt = [readable_span(pickle.loads(pickle.dumps(span_record(span))), RESOURCE) for span in spans]
    assert encode_spans(rebuilt).SerializeToString(deterministic=True) == \
        encode_spans(spans).SerializeToString(deterministic=True)


def test_spans_the_exporter_cannot_deliver_are_counted_and_the_loop_goes_on():
    records = [span_record(span) for span in finished_spans()]
    source = io.BytesIO(b"".join(pickle.dumps(batch) for batch in (records, records[:1], records)))
    outcomes = iter([False, "raise", True])
    sent, dropped = [], []

    def export(spans):
        outcome = next(outcomes)
        if outcome == "raise":
            raise ConnectionError("collector down")
        sent.append([span.name for span in spans])
        return outcome

    export_batches(source, export, RESOURCE, dropped.append)
    assert dropped == [2, 1]  # the refused batch, the batch whose export raised
    assert sent == [["text_completion m", "engine incident m"]] * 2  # the third batch still went


def test_a_batch_cut_short_by_the_stubs_death_ends_the_loop_quietly():
    records = [span_record(span) for span in finished_spans()]
    whole, cut = pickle.dumps(records), pickle.dumps(records)[:-20]
    sent = []
    export_batches(io.BytesIO(whole + cut), lambda spans: sent.append(len(spans)) or True, RESOURCE, sent.append)
    assert sent == [2]  # the whole batch went; the cut one ended the loop


def test_the_export_process_counts_what_it_could_not_send_and_ends_with_the_tracer(dead_port_tracer):
    """The real process, against a port nobody serves: the spans come back as a count, and the tracer's shutdown
    waits for the process (bounded) instead of leaving it behind."""
    dropped: list[int] = []
    tracer = dead_port_tracer(on_dropped=dropped.append)
    for _ in range(3):
        tracer.start(f'{{"traceparent": "{PARENT}"}}', "x", {}).end("completed")
    started = time.monotonic()
    tracer.shutdown()
    assert sum(dropped) == 3
    assert tracer.exporter.process.poll() == 0, "the export process should have exited on its own"
    assert time.monotonic() - started < 15


def test_spans_after_the_export_process_died_are_dropped_and_counted(dead_port_tracer):
    dropped: list[int] = []
    warnings: list[str] = []
    tracer = dead_port_tracer(on_dropped=dropped.append, log_warn=warnings.append)
    process = tracer.exporter
    process.process.kill()
    process.process.wait()
    deadline = time.monotonic() + 10
    while not any("has exited" in w for w in warnings) and time.monotonic() < deadline:
        tracer.start(f'{{"traceparent": "{PARENT}"}}', "x", {}).end("completed")
        process.force_flush()
        time.sleep(0.1)
    assert any("span export process has exited" in w for w in warnings), warnings
    before = sum(dropped)
    tracer.start(f'{{"traceparent": "{PARENT}"}}', "x", {}).end("completed")
    assert sum(dropped) == before + 1


def test_a_request_span_encodes_as_the_sdk_span_it_replaces(dead_port_tracer):
    """The backend's request span, never an SDK span in the stub, reaches the receiver as the SDK span with the
    same ids, times, attributes, events and status would have."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    records = []
    tracer = dead_port_tracer()
    tracer.exporter.submit = records.append
    span = tracer.start(f'{{"traceparent": "{PARENT}", "tracestate": "vendor=x"}}', "text_completion m",
                        {"gen_ai.request.max_tokens": 16, "gen_ai.request.temperature": 0.5})
    span.event("first token")
    span.set({"gen_ai.response.finish_reasons": ["length"], "vllm_triton.stream": True})
    span.end("cancelled", "the client cancelled")
    (record,) = records

    class SameIds(RandomIdGenerator):
        def generate_span_id(self) -> int:
            return record.span_id

    exporter, provider = InMemorySpanExporter(), TracerProvider(resource=RESOURCE, id_generator=SameIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    parent = TraceContextTextMapPropagator().extract({"traceparent": PARENT, "tracestate": "vendor=x"})
    sdk_span = provider.get_tracer("vllm_triton_observable").start_span(
        record.name, context=parent, kind=SpanKind.INTERNAL, start_time=record.start_ns)
    sdk_span.set_attributes(record.attributes)
    for name, at_ns, _ in record.events:
        sdk_span.add_event(name, timestamp=at_ns)
    sdk_span.set_status(Status(StatusCode.ERROR, "the client cancelled"))
    sdk_span.end(end_time=record.end_ns)
    assert encode_spans([readable_span(record, RESOURCE)]).SerializeToString(deterministic=True) == \
        encode_spans(exporter.get_finished_spans()).SerializeToString(deterministic=True)


def test_vllm_is_handed_the_flags_an_sdk_span_would_carry(dead_port_tracer):
    """The sampled flag, and W3C Trace Context Level 2's random-trace-id flag where the parent has it."""
    from opentelemetry import trace

    tracer = dead_port_tracer()
    sdk_tracer = TracerProvider(resource=RESOURCE).get_tracer("sdk")
    for flags in ("01", "03"):
        parent = f"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{flags}"
        ours = tracer.start(f'{{"traceparent": "{parent}"}}', "x", {}).headers()["traceparent"]
        context = TraceContextTextMapPropagator().extract({"traceparent": parent})
        sdk_span = sdk_tracer.start_span("x", context=context)
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(sdk_span))
        assert ours[-2:] == carrier["traceparent"][-2:] == flags
