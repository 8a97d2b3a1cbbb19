"""A real OTLP/HTTP receiver, the one the tests, the benchmark and the first-token timeline share: traces as
Triton's OTLP/JSON (opentelemetry-cpp sends JSON bodies with hex ids) and the Python SDK's OTLP/protobuf (this
backend, vLLM), metrics as OTLP/protobuf at /v1/metrics (the backend's OTLP_METRICS); every span and metric data
point kept as plain data.

In the tests' process: `with OtlpReceiver() as receiver:`. As a process of its own (so that the exporters' posts
cost the measured processes nothing but the export itself): `python scripts/otlp_receiver.py PORT [--discard]`;
`GET /` answers how many exports arrived, by content type, `GET /spans` the spans kept (none with --discard, which
keeps only how many spans each service sent, `GET /services`: `make bench`'s traced configuration).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from triton_launcher import free_port


def _value(value: dict[str, Any]) -> Any:
    """An OTLP AnyValue in its JSON mapping → a Python value."""
    kind, raw = next(iter(value.items()), ("", None))
    if kind == "intValue":
        return int(raw)
    if kind == "arrayValue":
        return [_value(v) for v in raw.get("values", [])]
    return raw


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {a["key"]: _value(a.get("value", {})) for a in items}


def _spans_from_json(body: dict[str, Any], ids: str) -> list[dict[str, Any]]:
    """`ids` is how the body spells ids: "hex" (OTLP/JSON as specified) or "base64" (protobuf's JSON mapping)."""
    import base64

    def hex_id(value: str) -> str:
        return base64.b64decode(value).hex() if ids == "base64" and value else (value or "")

    spans = []
    for resource_spans in body.get("resourceSpans", []):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                spans.append({
                    "name": span["name"], "trace_id": hex_id(span["traceId"]), "span_id": hex_id(span["spanId"]),
                    "parent_id": hex_id(span.get("parentSpanId", "")), "service": resource.get("service.name"),
                    "start": int(span["startTimeUnixNano"]), "end": int(span["endTimeUnixNano"]),
                    "attributes": _attributes(span.get("attributes", [])),
                    "events": [e["name"] for e in span.get("events", [])],
                    "event_times": [(e["name"], int(e["timeUnixNano"])) for e in span.get("events", [])],
                    "status": span.get("status", {}),
                })
    return spans


def _points_from_json(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every data point of an ExportMetricsServiceRequest (protobuf's JSON mapping), with its metric's name and
    type, ids in hex."""
    import base64

    points = []
    for resource_metrics in body.get("resourceMetrics", []):
        resource = _attributes(resource_metrics.get("resource", {}).get("attributes", []))
        for scope_metrics in resource_metrics.get("scopeMetrics", []):
            for metric in scope_metrics.get("metrics", []):
                kind = next(k for k in ("sum", "gauge", "histogram") if k in metric)
                for point in metric[kind].get("dataPoints", []):
                    points.append({
                        "name": metric["name"], "type": kind, "service": resource.get("service.name"),
                        "attributes": _attributes(point.get("attributes", [])),
                        "value": point.get("asDouble", int(point.get("asInt", 0))),
                        "count": int(point.get("count", 0)), "sum": point.get("sum", 0.0),
                        "bucket_counts": [int(c) for c in point.get("bucketCounts", [])],
                        "bounds": point.get("explicitBounds", []),
                        "exemplars": [{"value": e.get("asDouble"),
                                       "trace_id": base64.b64decode(e.get("traceId", "")).hex(),
                                       "span_id": base64.b64decode(e.get("spanId", "")).hex()}
                                      for e in point.get("exemplars", [])],
                    })
    return points


def _spans_by_service(raw: bytes, kind: str) -> dict[str, int]:
    """How many spans an export carries, by its resources' service.name: whose spans arrived, without keeping them."""
    counts: dict[str, int] = {}
    if "json" in kind:
        for resource_spans in json.loads(raw).get("resourceSpans", []):
            service = _attributes(resource_spans.get("resource", {}).get("attributes", [])).get("service.name")
            count = sum(len(scope.get("spans", [])) for scope in resource_spans.get("scopeSpans", []))
            counts[str(service)] = counts.get(str(service), 0) + count
        return counts
    for resource_spans in ExportTraceServiceRequest.FromString(raw).resource_spans:
        service = next((a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"),
                       "None")
        counts[service] = counts.get(service, 0) + sum(len(scope.spans) for scope in resource_spans.scope_spans)
    return counts


class OtlpReceiver:
    def __init__(self, port: int | None = None, discard: bool = False) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"
        self.metrics_url = f"http://127.0.0.1:{self.port}/v1/metrics"
        self.spans: list[dict[str, Any]] = []
        self.metric_exports: list[list[dict[str, Any]]] = []  # one list of data points per export received
        self.bodies: dict[str, int] = {}  # content type → requests received
        self.span_counts: dict[str, int] = {}  # service → spans received (--discard keeps only these counts)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a collector does

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                kind = self.headers.get("Content-Type", "")
                if discard:
                    counts = _spans_by_service(raw, kind) if self.path.endswith("/v1/traces") else {}
                    with receiver._lock:
                        receiver.bodies[kind] = receiver.bodies.get(kind, 0) + 1
                        for service, count in counts.items():
                            receiver.span_counts[service] = receiver.span_counts.get(service, 0) + count
                    self._answer(b"{}" if "json" in kind else b"", kind or "application/x-protobuf")
                    return
                if self.path.endswith("/v1/metrics"):
                    from google.protobuf.json_format import MessageToDict

                    points = _points_from_json(MessageToDict(ExportMetricsServiceRequest.FromString(raw)))
                    answer = ExportMetricsServiceResponse().SerializeToString()
                    with receiver._lock:
                        receiver.metric_exports.append(points)
                    self._answer(answer, "application/x-protobuf")
                    return
                if "json" in kind:
                    spans = _spans_from_json(json.loads(raw), ids="hex")
                    answer, answer_type = b"{}", "application/json"
                else:
                    from google.protobuf.json_format import MessageToDict

                    request = ExportTraceServiceRequest.FromString(raw)
                    spans = _spans_from_json(MessageToDict(request), ids="base64")
                    answer, answer_type = ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf"
                with receiver._lock:
                    receiver.spans.extend(spans)
                    receiver.bodies[kind] = receiver.bodies.get(kind, 0) + 1
                self._answer(answer, answer_type)

            def do_GET(self) -> None:  # noqa: N802
                with receiver._lock:
                    answer = json.dumps(receiver.spans if self.path == "/spans" else receiver.span_counts
                                        if self.path == "/services" else receiver.bodies).encode()
                self._answer(answer, "application/json")

            def _answer(self, body: bytes, content_type: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def latest_metrics(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.metric_exports[-1]) if self.metric_exports else []

    def trace_ids(self) -> set[str]:
        with self._lock:
            return {s["trace_id"] for s in self.spans}

    def trace(self, trace_id: str, names: set[str], timeout: float = 60) -> dict[str, dict[str, Any]]:
        """The spans of one trace by name, once every name in `names` has arrived (or at the timeout: exporters
        batch, and on two loaded cores Triton's took over 20 s once)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = {s["name"]: s for s in self.spans if s["trace_id"] == trace_id}
            if names <= set(found) or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def carrying(self, value: str) -> dict[str, list[str]]:
        """Trace id → names of the spans with an attribute equal to `value`: where a request's spans went."""
        found: dict[str, list[str]] = {}
        with self._lock:
            for span in self.spans:
                if value in span["attributes"].values():
                    found.setdefault(span["trace_id"], []).append(span["name"])
        return found

    def span(self, name: str, timeout: float = 20) -> dict[str, Any]:
        """The first span called `name` (any trace), waiting for it to arrive."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = next((s for s in self.spans if s["name"] == name), None)
            if found is not None:
                return found
            assert time.monotonic() < deadline, f"no span {name!r} arrived within {timeout:g} s"
            time.sleep(0.2)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="An OTLP/HTTP receiver in a process of its own.")
    parser.add_argument("port", type=int)
    parser.add_argument("--discard", action="store_true", help="count exports, keep nothing")
    args = parser.parse_args()
    OtlpReceiver(args.port, discard=args.discard)._server.serve_forever()
