"""A finished span as plain data: what the stub hands the span export process (tracing/export_process.py), one
pickled batch of them at a time. Its own module, without the OpenTelemetry SDK, so that the request spans
(tracing/spans.py) can make one without importing the SDK where tracing is off."""

from __future__ import annotations

from typing import Any, NamedTuple


class SpanRecord(NamedTuple):
    """A finished span as plain, picklable data. Links and dropped-attribute counts are not carried: the backend's
    spans have neither."""
    name: str
    trace_id: int
    span_id: int
    trace_flags: int
    trace_state: str  # its W3C `tracestate` header; "" when empty
    parent: tuple[int, bool] | None  # (span id, is remote)
    kind: int  # SpanKind's value
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]  # (name, time ns, attributes)
    status: int  # StatusCode's value
    description: str | None
    scope: tuple[str, str | None] | None  # the instrumentation scope's (name, version)
