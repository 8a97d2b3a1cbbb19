"""Finished spans leave the stub as plain data; a process of their own turns them into OTLP and sends them.

Why a process: the stub's one GIL is the serving path's limit when it is busy, and there every traced request cost
about 0.6 ms of the stub's CPU (docs/benchmarks.md: 256 streams on the H100, tracing every request cost 8 % of the
tokens per second). The largest part was the OTLP exporter's Python: building a protobuf message per attribute
and event took longer than making the span (on the CPU machine ≈ 0.17 ms for the backend's span against 0.15 ms).
What stays in the stub is a copy of each finished span's fields (≈ 0.01 ms) and one pickled write per batch to a
pipe, written by a thread of its own (the write releases the GIL).

The exporting process runs the SDK's own OTLPSpanExporter over ReadableSpans rebuilt from those fields, so the
receiver gets what an exporter in the stub would have sent (a unit test compares the encodings). It reads batches
until its stdin closes — the stub's shutdown, or the stub's death — and then exits, so it never outlives its stub
for longer than one export's timeout.

Spans that are not delivered are counted, never raised into serving: those the exporter could not send (the
process reports them on its stdout), those beyond QUEUE_SIZE while the pipe is full, and those left when the
process has gone.
"""

from __future__ import annotations

import json
import logging
import pickle
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import IO, Any

from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from ..common.helper_process import helper_command
from ..common.owned_thread import OwnedThread
from .span_record import SpanRecord

QUEUE_SIZE = 2048  # spans held for export at most; beyond that they are dropped (and counted) rather than block serving
BATCH_SIZE = 512  # spans per pickled write
SCHEDULE_DELAY_S = 0.5  # how long a finished span may wait for its batch to fill
EXIT_GRACE_S = 15.0  # for the process to send what it holds at shutdown: the exporter's 10 s timeout, and its start


def span_record(span: ReadableSpan) -> SpanRecord:
    """A finished SDK span's record (its attribute values are already the SDK's cleaned ones)."""
    context, parent, status, scope = span.context, span.parent, span.status, span.instrumentation_scope
    return SpanRecord(span.name, context.trace_id, context.span_id, int(context.trace_flags),
                      context.trace_state.to_header(), None if parent is None else (parent.span_id, parent.is_remote),
                      span.kind.value, span.start_time, span.end_time, dict(span.attributes),
                      [(event.name, event.timestamp, dict(event.attributes or {})) for event in span.events],
                      status.status_code.value, status.description,
                      (scope.name, scope.version) if scope else None)


def readable_span(record: SpanRecord, resource: Any) -> ReadableSpan:
    """The SDK span a record was made from, as the exporter reads it."""
    r = record
    context = SpanContext(r.trace_id, r.span_id, is_remote=False, trace_flags=TraceFlags(r.trace_flags),
                          trace_state=TraceState.from_header([r.trace_state]) if r.trace_state else None)
    return ReadableSpan(
        name=r.name, context=context, resource=resource, attributes=r.attributes, kind=SpanKind(r.kind),
        parent=None if r.parent is None else SpanContext(r.trace_id, r.parent[0], is_remote=r.parent[1]),
        events=[Event(name, attributes, timestamp) for name, timestamp, attributes in r.events],
        status=Status(StatusCode(r.status), r.description), start_time=r.start_ns, end_time=r.end_ns,
        instrumentation_scope=InstrumentationScope(*r.scope) if r.scope else None)


def export_batches(source: IO[bytes], export: Callable[[list[ReadableSpan]], bool], resource: Any,
                   report_dropped: Callable[[int], None]) -> None:
    """The exporting process's loop: every pickled batch from `source` to `export`, the spans of each batch it
    could not send reported, until `source` ends."""
    while True:
        try:
            records = pickle.load(source)
        except (EOFError, pickle.UnpicklingError):  # the stub closed the pipe, or died half-way through a batch
            return
        spans = [readable_span(record, resource) for record in records]
        try:
            delivered = export(spans)
        except Exception:  # an exporter bug must not end the exports that follow
            delivered = False
        if not delivered:
            report_dropped(len(spans))


def main(argv: list[str]) -> int:
    """`ENDPOINT RESOURCE_JSON`: the OTLP/HTTP traces URL and the stub's resource attributes."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SpanExportResult

    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)  # counted instead of logged
    exporter = OTLPSpanExporter(endpoint=argv[0])
    resource = Resource(json.loads(argv[1]))

    def report_dropped(count: int) -> None:
        sys.stdout.write(f"{count}\n")
        sys.stdout.flush()

    try:
        export_batches(sys.stdin.buffer, lambda spans: exporter.export(spans) is SpanExportResult.SUCCESS,
                       resource, report_dropped)
    finally:
        exporter.shutdown()
    return 0


class ExportProcess(SpanProcessor):
    """The stub's side: the span processor whose finished spans go to the exporting process in batches."""

    def __init__(self, endpoint: str, resource: Mapping[str, Any], on_dropped: Callable[[int], None],
                 log_warn: Callable[[str], None]) -> None:
        self._on_dropped, self._log_warn = on_dropped, log_warn
        self.process = subprocess.Popen(
            helper_command(__name__, [endpoint, json.dumps(dict(resource))]), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, start_new_session=True, close_fds=True)
        self._spans: deque[SpanRecord] = deque()
        self._lock = threading.Lock()
        self._ready = threading.Event()  # a batch is full, or the stub shuts down
        self._closed = False
        self._writer = OwnedThread(self._write_batches, "span export writer", join_timeout_s=EXIT_GRACE_S,
                                   wake=self._ready.set)
        self._reader = OwnedThread(self._read_reports, "span export reports", join_timeout_s=EXIT_GRACE_S)
        self._writer.start()
        self._reader.start()

    def on_end(self, span: ReadableSpan) -> None:
        """The SDK's spans (health incidents)."""
        self.submit(span_record(span))

    def submit(self, record: SpanRecord) -> None:
        """A finished span, to be sent with the next batch."""
        with self._lock:
            if self._closed or len(self._spans) >= QUEUE_SIZE:
                dropped = True
            else:
                dropped = False
                self._spans.append(record)
                if len(self._spans) >= BATCH_SIZE:
                    self._ready.set()
        if dropped:
            self._on_dropped(1)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._ready.set()
        return True

    def shutdown(self) -> None:
        """Send what is held, close the pipe, and wait (bounded) for the process to export it and exit."""
        with self._lock:
            self._closed = True
        self._writer.stop()  # it writes what is left, then closes the process's stdin
        try:
            self.process.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self._log_warn(f"tracing: the span export process did not finish within {EXIT_GRACE_S:.0f} s of the "
                           "model's unload; stopped, its spans dropped")
            self.process.kill()
            self.process.wait()
        self._reader.stop()

    def _take(self) -> list[SpanRecord]:
        with self._lock:
            batch = [self._spans.popleft() for _ in range(min(BATCH_SIZE, len(self._spans)))]
            if len(self._spans) < BATCH_SIZE:
                self._ready.clear()
        return batch

    def _write_batches(self) -> None:
        pipe = self.process.stdin
        assert pipe is not None
        batch: list[SpanRecord] = []
        try:
            while True:
                self._ready.wait(SCHEDULE_DELAY_S)
                stopping = self._writer.stopping.is_set()
                while batch := self._take():
                    pickle.dump(batch, pipe, protocol=pickle.HIGHEST_PROTOCOL)
                    pipe.flush()
                if stopping:
                    return
        except (OSError, ValueError):  # a broken pipe: the process has gone
            self._gone(in_flight=len(batch))
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    def _gone(self, in_flight: int) -> None:
        """The process has ended while the stub serves: every span from now on is dropped and counted."""
        with self._lock:
            self._closed = True
            held = in_flight + len(self._spans)
            self._spans.clear()
        self._log_warn(f"tracing: the span export process has exited (status {self.process.poll()}); spans are "
                       "dropped from now on and counted in vllm_triton_trace_spans_dropped_total")
        self._on_dropped(held)

    def _read_reports(self) -> None:
        """The process's report of spans it could not send: one count per line, until it exits."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self._on_dropped(int(line))
            except ValueError:
                continue
