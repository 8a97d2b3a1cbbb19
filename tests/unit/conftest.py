"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest


@pytest.fixture
def dead_port_tracer(monkeypatch) -> Iterator[Callable[..., object]]:
    """Makes the backend's RequestTracers with real export processes that send to a port nobody serves (they give
    up within a second); every one is shut down after the test (a second shutdown is harmless)."""
    from vllm_triton_observable.tracing.spans import RequestTracer, TraceSettings

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    made: list[RequestTracer] = []

    def make(on_dropped: Callable[[int], None] = lambda n: None,
             log_warn: Callable[[str], None] = lambda m: None) -> RequestTracer:
        tracer = RequestTracer(TraceSettings("http://127.0.0.1:9/v1/traces"), {}, on_dropped, log_warn,
                               service_name="test")
        made.append(tracer)
        return tracer

    yield make
    for tracer in made:
        tracer.shutdown()
