"""Exemplars: for each latency histogram bucket, the last traced request whose value fell into it.

Triton's metrics endpoint cannot carry exemplars, so they go out only with the OTLP metrics (metrics.otlp_metrics).
vLLM observes its histograms without knowing the request's trace, but hands every request's own timings to its
caller in the final `RequestOutput.metrics` (vLLM's `RequestStateStats`): the backend, which holds the request's
span, records from them the values vLLM observed — the time to first token exactly as vLLM computed it, the
end-to-end latency from vLLM's arrival time to the final output — with the trace and span id, so that a slow
bucket on a dashboard opens the trace of a request in it. One exemplar per bucket, the latest: memory is bounded
by the buckets, never by traffic.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import names


@dataclass(frozen=True)
class Exemplar:
    value: float
    time_unix_nano: int
    trace_id: int
    span_id: int


def request_values(stats: Any, now: Callable[[], float] = time.time) -> dict[str, float]:
    """The latency values vLLM observed for one finished request, by histogram family, from its RequestStateStats
    (none when vLLM gave none: stats off, or a release that does not hand them out)."""
    values = {}
    ttft = getattr(stats, "first_token_latency", 0.0)
    if ttft > 0:
        values[names.VLLM_TTFT] = ttft
    arrival = getattr(stats, "arrival_time", 0.0)
    if arrival > 0:
        values[names.VLLM_E2E_LATENCY] = now() - arrival
    return values


class ExemplarStore:
    """Thread-safe: recorded from vLLM's event loop, read by the OTLP exporter's thread."""

    def __init__(self, buckets: Callable[[str], tuple[float, ...]]) -> None:
        self._buckets = buckets  # a family's finite bucket bounds
        self._latest: dict[str, dict[int, Exemplar]] = {}
        self._lock = threading.Lock()

    def record(self, family: str, value: float, trace_id: int, span_id: int) -> None:
        bucket = bisect_left(self._buckets(family), value)  # the bucket `le` counts it in (+Inf last)
        exemplar = Exemplar(value, time.time_ns(), trace_id, span_id)
        with self._lock:
            self._latest.setdefault(family, {})[bucket] = exemplar

    def request_finished(self, ids: tuple[int, int], stats: Any) -> None:
        """Called on vLLM's event loop just before a request's final response: it must never fail that request."""
        try:
            for family, value in request_values(stats).items():
                self.record(family, value, *ids)
        except Exception:  # an exemplar is a hint; the request and its metrics go on without it
            pass

    def of(self, family: str) -> list[Exemplar]:
        with self._lock:
            return sorted(self._latest.get(family, {}).values(), key=lambda e: e.value)
