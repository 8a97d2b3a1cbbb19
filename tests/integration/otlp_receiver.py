"""A real OTLP/HTTP traces receiver for the tests: accepts Triton's OTLP/JSON (opentelemetry-cpp sends JSON bodies
with hex ids) and the Python SDK's OTLP/protobuf (this backend, vLLM), and keeps every span as plain data."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
                    "status": span.get("status", {}),
                })
    return spans


class OtlpReceiver:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"
        self.spans: list[dict[str, Any]] = []
        self.bodies: dict[str, int] = {}  # content type → requests received
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                kind = self.headers.get("Content-Type", "")
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
                self.send_response(200)
                self.send_header("Content-Type", answer_type)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

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
