"""One OpenTelemetry trace from the client through Triton and this backend into vLLM, received by a real OTLP
receiver: tritonserver in OpenTelemetry mode (`rate=0`: only requests that carry a `traceparent` are traced)
exports OTLP/JSON, the backend and vLLM export OTLP/protobuf to the same place."""

from __future__ import annotations

import json
import queue
import secrets
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from helpers import (
    BASE_ENGINE,
    cmdline,
    engine_of,
    generate,
    grpc_inputs,
    grpc_stream,
    run,
    server_env,
    snapshot,
    stub_of,
    value,
    wait_until,
    write_model,
)
from otlp_receiver import OtlpReceiver
from triton_launcher import TritonServer

from vllm_triton_observable.metrics import names

MODEL = "vllm_model"
PROMPT = "Tracing shows where the time goes"
BACKEND_SPAN = f"text_completion {MODEL}"
VLLM_SPAN = "llm_request"


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    repo = tmp_path_factory.mktemp("traced_repository")
    # Health on with restart (the incident test kills the engine last), with the monitor's default timeouts.
    # OTLP metrics on, every half second, to the same receiver.
    write_model(repo, MODEL, BASE_ENGINE, params={"REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true",
                                                  "HEALTH_RECOVERY": "restart",
                                                  "HEALTH_RESTART_BACKOFF_S": "0.5", "OTLP_METRICS": "true"})
    with OtlpReceiver() as receiver:
        env = {**{k: v for k, v in server_env().items() if not k.startswith("OTEL_")},
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.metrics_url, "OTEL_METRIC_EXPORT_INTERVAL": "500"}
        with TritonServer(repo, env=env, extra_args=[
                "--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={receiver.url}",
                "--trace-config", "rate=0", "--trace-config", "level=TIMESTAMPS",
                # the client's traceparent reaches the model as a request parameter too (the backend's span
                # continues it where Triton's gRPC frontend loses the context); over HTTP, beside the request's
                # sampling parameters
                "--grpc-header-forward-pattern", "traceparent",
                "--http-header-forward-pattern", "traceparent"]) as triton:
            triton.wait_ready(timeout=600)
            yield triton, receiver


TRACES: set[str] = set()  # every trace these tests started; any other trace at the receiver is a defect


def traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    TRACES.add(trace_id)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-01"


def generate_traced(server, body: dict, stream: bool = False) -> tuple[str, requests.Response]:
    trace_id, header = traceparent()
    endpoint = "generate_stream" if stream else "generate"
    response = requests.post(f"{server.http_url}/v2/models/{MODEL}/{endpoint}", json=body,
                             headers={"traceparent": header}, timeout=60)
    return trace_id, response


def grpc_traced(receiver, send, names: set[str], attempts: int = 3, wait: float = 40) -> dict[str, dict]:
    """`send(traceparent)` a gRPC streaming request under a fresh trace and return the spans by name of the first
    trace that has every one of `names`, or, failing that, of the fullest one.

    Triton 2.51's gRPC frontend now and then does not trace a stream that carries a `traceparent` at all (it reads
    the header past its end: backend/trace_attributes.py); the backend's span then continues the client's trace,
    but the chain through Triton's span, which these tests check, is missing. On loaded cores a request's spans
    have also taken over 30 s to arrive. So up to `attempts` requests are sent, each under a new trace, every
    `wait` seconds while no trace is whole, and every trace sent stays a candidate to the end: a late trace counts
    as much as a retried one."""
    sent: list[str] = []
    for _ in range(attempts):
        trace_id, header = traceparent()
        sent.append(trace_id)
        send(header)
        deadline = time.monotonic() + wait
        while True:
            traces = [receiver.trace(t, names, timeout=0) for t in sent]
            whole = next((spans for spans in traces if names <= set(spans)), None)
            if whole is not None:
                return whole
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    return max(traces, key=len)


def where_it_went(server, receiver, client_request_id: str) -> str:
    """For a failed trace assertion: the traces that hold spans of the request, and the server log's lines for it
    (a cancellation the backend noticed is logged there)."""
    lines = [line for line in server.log_text().splitlines() if f"request id {client_request_id}-" in line]
    return (f"spans carrying request id {client_request_id!r} by trace: {receiver.carrying(client_request_id)}; "
            f"{len(receiver.spans)} spans received in all; the server log on it: {lines[-6:]}")


def check_chain(spans: dict[str, dict]) -> None:
    """Triton's model span → the backend's span → vLLM's llm_request, one trace, the backend span covering the
    generation."""
    backend, vllm = spans[BACKEND_SPAN], spans[VLLM_SPAN]
    model_span = next(s for s in spans.values() if s["span_id"] == backend["parent_id"])
    assert model_span["service"] != backend["service"] and model_span["attributes"].get(
        "triton.model_name") == MODEL, model_span  # Triton's span for the model
    assert vllm["parent_id"] == backend["span_id"]
    assert (backend["service"], vllm["service"]) == ("vllm-triton-backend", "vllm")
    assert backend["start"] <= vllm["start"] and backend["end"] >= vllm["end"]
    assert backend["events"][:2] == ["submitted to the engine", "first token"]
    assert backend["events"].index("first response sent") == 2  # once, after the first token
    assert backend["events"][-1] == "final response sent"
    assert backend["attributes"]["gen_ai.provider.name"] == "vllm"
    assert backend["attributes"]["triton.model_name"] == MODEL


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "generate_stream"])
def test_one_trace_from_the_client_through_triton_and_the_backend_into_vllm(traced, stream):
    server, receiver = traced
    body = {"text_input": PROMPT, "return_num_input_tokens": True, "return_num_output_tokens": True,
            "parameters": {"max_tokens": 12, "ignore_eos": True, "temperature": 0.5, "top_p": 0.9,
                           "stream": stream}}
    trace_id, response = generate_traced(server, body, stream=stream)
    assert response.status_code == 200, response.text
    spans = receiver.trace(trace_id, {"InferRequest", BACKEND_SPAN, VLLM_SPAN})
    assert {"InferRequest", BACKEND_SPAN, VLLM_SPAN} <= set(spans), sorted(spans)
    check_chain(spans)
    attributes = spans[BACKEND_SPAN]["attributes"]
    answers = [line for line in response.text.splitlines() if line.strip()]
    parsed = [json.loads(a.removeprefix("data: ")) for a in answers]
    assert attributes["gen_ai.usage.input_tokens"] == parsed[0]["num_input_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == sum(p["num_output_tokens"] for p in parsed) == 12
    assert attributes["gen_ai.request.max_tokens"] == 12 and attributes["gen_ai.request.temperature"] == 0.5
    assert attributes["gen_ai.request.top_p"] == pytest.approx(0.9)
    assert attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert attributes["vllm_triton.stream"] is stream and attributes["vllm_triton.outcome"] == "completed"
    assert spans[VLLM_SPAN]["attributes"]["gen_ai.usage.completion_tokens"] == 12


def test_the_backends_spans_leave_the_stub_through_a_process_of_their_own(traced):
    """Their OTLP encoding runs off the stub's GIL, in one child of the stub (every backend span these tests
    receive came through it)."""
    server, receiver = traced
    trace_id, response = generate_traced(server, {"text_input": PROMPT, "parameters": {"max_tokens": 2}})
    assert response.status_code == 200, response.text
    assert BACKEND_SPAN in receiver.trace(trace_id, {BACKEND_SPAN})
    stub = stub_of(server, MODEL)
    exporters = [p for p in stub.children() if "tracing.export_process" in cmdline(p)]
    assert len(exporters) == 1, [cmdline(p) for p in stub.children()]


def test_otlp_metrics_are_the_registry_with_exemplars_that_name_real_traces(traced):
    from vllm_triton_observable.metrics.catalogue import vllm_families

    server, receiver = traced
    body = {"text_input": PROMPT, "parameters": {"max_tokens": 6, "ignore_eos": True}}
    trace_id, response = generate_traced(server, body)
    assert response.status_code == 200, response.text

    def ttft_point() -> dict | None:
        return next((p for p in receiver.latest_metrics() if p["name"] == names.VLLM_TTFT
                     and p["attributes"].get("model") == MODEL
                     and any(e["trace_id"] == trace_id for e in p["exemplars"])), None)

    wait_until(lambda: ttft_point() is not None, timeout=20)
    point = ttft_point()
    exemplar = next(e for e in point["exemplars"] if e["trace_id"] == trace_id)
    spans = receiver.trace(trace_id, {BACKEND_SPAN})
    assert exemplar["span_id"] == spans[BACKEND_SPAN]["span_id"]  # the exemplar opens the backend's span
    assert {e["trace_id"] for e in point["exemplars"]} <= receiver.trace_ids()  # every exemplar names a real trace
    ttft = next(f for f in vllm_families(BASE_ENGINE) if f.name == names.VLLM_TTFT)
    assert point["type"] == "histogram" and point["bounds"] == list(ttft.buckets)
    assert sum(point["bucket_counts"]) == point["count"] > 0
    bucket = next(i for i, le in enumerate([*point["bounds"], float("inf")]) if exemplar["value"] <= le)
    assert exemplar["value"] > 0 and point["bucket_counts"][bucket] > 0  # a request that fell into that bucket
    assert point["attributes"]["model_instance"] == f"{MODEL}_0_0" and point["service"] == "vllm-triton-backend"

    # the same values as Triton's endpoint, once both have the request (no traffic meanwhile)
    def same() -> bool:
        families = snapshot(server)
        exported = {(p["name"], p["type"]): p for p in receiver.latest_metrics()
                    if p["attributes"].get("model") == MODEL and p["attributes"].get("engine") == "0"}
        ttft_count = exported[(names.VLLM_TTFT, "histogram")]["count"]
        tokens = exported[(names.VLLM_GENERATION_TOKENS, "sum")]["value"]
        return (ttft_count == value(families, f"{names.VLLM_TTFT}_count", model=MODEL)
                and tokens == value(families, names.VLLM_GENERATION_TOKENS, model=MODEL))

    wait_until(same, timeout=15)
    families = snapshot(server)
    assert value(families, names.OTLP_METRIC_EXPORTS, model=MODEL) > 0
    assert value(families, names.OTLP_METRIC_EXPORTS_FAILED, model=MODEL) == 0


def test_grpc_streaming_with_a_request_id_joins_ids(traced):
    server, receiver = traced
    inputs = []
    for name, array, dtype in [("text_input", np.array([PROMPT.encode()], dtype=object), "BYTES"),
                               ("stream", np.array([True]), "BOOL"),
                               ("sampling_parameters", np.array([b'{"max_tokens": 6}'], dtype=object), "BYTES")]:
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)

    def send(header: str) -> None:
        responses: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        client.start_stream(callback=lambda result, error: responses.put((result, error)),
                            headers={"traceparent": header})
        client.async_stream_infer(MODEL, inputs, request_id="order-42", enable_empty_final_response=True)
        while True:
            result, error = responses.get(timeout=60)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()

    spans = grpc_traced(receiver, send, {"InferRequest", BACKEND_SPAN, VLLM_SPAN})
    assert {"InferRequest", BACKEND_SPAN, VLLM_SPAN} <= set(spans), (sorted(spans),
                                                                    where_it_went(server, receiver, "order-42"))
    check_chain(spans)
    backend = spans[BACKEND_SPAN]["attributes"]
    assert backend["triton.request_id"] == "order-42"
    assert backend["gen_ai.response.id"].startswith("order-42-")  # the vLLM request id carries the client's id
    assert spans[VLLM_SPAN]["attributes"]["gen_ai.request.id"] == backend["gen_ai.response.id"]


def test_a_rejected_request_ends_its_span_with_error(traced):
    server, receiver = traced
    trace_id, response = generate_traced(server, {"text_input": PROMPT, "parameters": {"max_tokens": 0}})
    assert response.status_code == 400
    spans = receiver.trace(trace_id, {BACKEND_SPAN})
    status = spans[BACKEND_SPAN]["status"]
    assert status.get("code") in ("STATUS_CODE_ERROR", 2) and "max_tokens" in status.get("message", ""), status
    assert spans[BACKEND_SPAN]["attributes"]["vllm_triton.outcome"] == "rejected"


def test_a_cancelled_request_ends_its_span_with_error(traced):
    server, receiver = traced

    def send(header: str) -> None:
        run(grpc_stream(server, MODEL, grpc_inputs(PROMPT, sampling={"max_tokens": 500, "ignore_eos": True}),
                        stop_after=2, headers={"traceparent": header}, request_id="cancel-me"))

    spans = grpc_traced(receiver, send, {BACKEND_SPAN})
    assert BACKEND_SPAN in spans, (sorted(spans), where_it_went(server, receiver, "cancel-me"))
    backend = spans[BACKEND_SPAN]
    assert backend["attributes"]["vllm_triton.outcome"] == "cancelled", backend["attributes"]
    assert backend["status"].get("code") in ("STATUS_CODE_ERROR", 2), backend["status"]
    assert "cancelled" in backend["status"].get("message", "")
    assert backend["attributes"].get("gen_ai.usage.output_tokens", 0) < 500  # it did not run to the end


def test_a_grpc_request_triton_did_not_trace_still_continues_the_clients_trace(traced):
    """Where Triton's gRPC frontend loses a request's trace context, the forwarded `traceparent` still reaches the
    model as a request parameter, and the backend's span (with vLLM's under it) continues the client's trace. First
    a request that carries it only as a parameter (Triton, with rate=0, never traces it); then streams with the
    header, every one of which gets its backend span: Triton's model span is its parent where Triton traced it, the
    client's span where it did not."""
    server, receiver = traced
    inputs = grpc_inputs(PROMPT, sampling={"max_tokens": 3})
    trace_id, header = traceparent()
    results = run(grpc_stream(server, MODEL, inputs, parameters={"traceparent": header}, request_id="param"))
    assert [e for _, e in results if e is not None] == []
    spans = receiver.trace(trace_id, {BACKEND_SPAN, VLLM_SPAN})
    assert set(spans) == {BACKEND_SPAN, VLLM_SPAN}, (sorted(spans), where_it_went(server, receiver, "param"))
    assert spans[BACKEND_SPAN]["parent_id"] == header.split("-")[2]  # the client's span
    assert spans[VLLM_SPAN]["parent_id"] == spans[BACKEND_SPAN]["span_id"]

    sent = [traceparent() for _ in range(8)]
    for i, (_, header) in enumerate(sent):
        results = run(grpc_stream(server, MODEL, inputs, headers={"traceparent": header}, request_id=f"h{i}"))
        assert [e for _, e in results if e is not None] == []
    lost_by_triton = 0
    for trace_id, header in sent:
        spans = receiver.trace(trace_id, {BACKEND_SPAN, VLLM_SPAN})
        assert {BACKEND_SPAN, VLLM_SPAN} <= set(spans), sorted(spans)
        parent = spans[BACKEND_SPAN]["parent_id"]
        if parent == header.split("-")[2]:
            lost_by_triton += 1
        else:  # Triton's model span, which Triton exports on its own schedule
            model_span = receiver.trace(trace_id, {MODEL}).get(MODEL, {})
            assert model_span.get("span_id") == parent, (sorted(spans), parent)
    print(f"Triton's gRPC frontend did not trace {lost_by_triton} of {len(sent)} streams with a traceparent; "
          "the backend traced every one")


def assert_no_strangers(server, receiver) -> None:
    """Every request span at the receiver is of a trace these tests started. Checked after one more traced request
    has arrived whole: what was exported before it has arrived too."""
    trace_id, response = generate_traced(server, {"text_input": "traced", "parameters": {"max_tokens": 2}})
    assert response.status_code == 200, response.text
    receiver.trace(trace_id, {"InferRequest", BACKEND_SPAN, VLLM_SPAN})
    # Request spans only: vLLM also traces its own start-up ("Overall Loading", …) once.
    request_spans = {"InferRequest", "compute", MODEL, BACKEND_SPAN, VLLM_SPAN}
    strangers = [s["name"] for s in receiver.spans if s["name"] in request_spans and s["trace_id"] not in TRACES]
    assert strangers == [], strangers


def test_a_request_triton_does_not_trace_gets_no_span(traced):
    server, receiver = traced
    response = requests.post(f"{server.http_url}/v2/models/{MODEL}/generate",
                             json={"text_input": "untraced", "parameters": {"max_tokens": 2}}, timeout=60)
    assert response.status_code == 200
    assert_no_strangers(server, receiver)
    assert value(snapshot(server), names.TRACE_SPANS_DROPPED, model=MODEL) == 0
    assert receiver.bodies.get("application/x-protobuf", 0) > 0 and receiver.bodies.get("application/json", 0) > 0


MALFORMED_TRACEPARENTS = ["garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                          "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                          "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"]


def test_a_malformed_traceparent_is_served_untraced(traced):
    """A client's `traceparent` that does not parse, forwarded to the model as a request parameter (HTTP header,
    gRPC metadata, or the gRPC request's own parameter): the request is served as any other and traced by nobody —
    Triton ignores the header, and the backend neither fails the request nor starts a trace of its own."""
    server, receiver = traced
    for i, bad in enumerate(MALFORMED_TRACEPARENTS):
        response = requests.post(f"{server.http_url}/v2/models/{MODEL}/generate", headers={"traceparent": bad},
                                 json={"text_input": PROMPT, "parameters": {"max_tokens": 2}}, timeout=60)
        assert response.status_code == 200 and response.json()["text_output"], (bad, response.text)
        inputs = grpc_inputs(PROMPT, sampling={"max_tokens": 2})
        for how, kwargs in [("metadata", {"headers": {"traceparent": bad}}),
                            ("parameter", {"parameters": {"traceparent": bad}})]:
            results = run(grpc_stream(server, MODEL, inputs, request_id=f"bad{i}-{how}", **kwargs))
            assert [e for _, e in results if e is not None] == [], (bad, how)
            assert results, (bad, how)
    # a valid context beside a tracestate that is not text (a gRPC parameter may be a number): served and traced
    trace_id, header = traceparent()
    results = run(grpc_stream(server, MODEL, grpc_inputs(PROMPT, sampling={"max_tokens": 2}), request_id="state",
                              parameters={"traceparent": header, "tracestate": 5}))
    assert [e for _, e in results if e is not None] == [] and results
    assert BACKEND_SPAN in receiver.trace(trace_id, {BACKEND_SPAN})
    assert_no_strangers(server, receiver)


def test_a_health_incident_is_a_trace_from_unhealthy_through_the_restart_to_recovery(traced):
    """Last of the traced tests: it replaces the engine."""
    server, receiver = traced
    core, _ = engine_of(stub_of(server, MODEL))
    core.kill()
    wait_until(lambda: value(snapshot(server), names.ENGINE_RESTARTS, model=MODEL) == 1, timeout=240, interval=1)
    incident = receiver.span(f"engine incident {MODEL}", timeout=30)
    restarts = [s for s in receiver.spans if s["name"] == "engine restart" and s["trace_id"] == incident["trace_id"]]
    assert incident["parent_id"] == "" and [s["parent_id"] for s in restarts] == [incident["span_id"]]
    assert incident["start"] <= restarts[0]["start"] and restarts[0]["end"] <= incident["end"]
    assert incident["events"] == ["unhealthy", "recovered"]
    assert incident["attributes"]["vllm_triton.health.cause"].startswith("the engine is dead")
    assert incident["attributes"]["triton.model_name"] == MODEL  # as on the request spans: one query finds both
    assert incident["attributes"]["vllm_triton.health.outcome"] == "recovered"
    assert restarts[0]["attributes"]["vllm_triton.restart.attempt"] == 1
    assert generate(server, MODEL, {"text_input": PROMPT, "parameters": {"max_tokens": 2}})[0] == 200


def test_no_tracing_configured_means_no_tracer(server):
    """The shared server runs without --trace-config: the backend builds no tracer and says nothing about it."""
    assert "tracing: on" not in server.log_text()
