"""The backend's own families (`vllm_triton_` prefix: no colon, which Prometheus reserves for recording rules)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..common.vocabulary import Outcome
from . import names
from .registry import InstanceRegistry, Kind

INFO_HELP = "Backend build and switches; always 1."


@dataclass(frozen=True)
class BackendInfo:
    vllm_version: str
    backend_version: str
    metrics_enabled: bool
    health_check_enabled: bool


class BackendFamilies:
    """Info, request outcomes and the exporter's own liveness; gauges are refreshed before each publish."""

    def __init__(self, registry: InstanceRegistry, info: BackendInfo, inflight_count: Callable[[], int]) -> None:
        classes = registry.classes()
        gauge, counter = classes[Kind.GAUGE], classes[Kind.COUNTER]
        self._registry = registry
        self._inflight_count = inflight_count
        gauge(names.INFO, INFO_HELP,
              labelnames=["vllm_version", "backend_version", "metrics_enabled", "health_check_enabled"]).labels(
            info.vllm_version, info.backend_version, str(info.metrics_enabled).lower(),
            str(info.health_check_enabled).lower()).set(1)
        self.inflight = gauge(names.REQUESTS_IN_FLIGHT,
                              "Requests accepted by this model instance and not yet answered with a final response.")
        finished = counter(names.REQUESTS_FINISHED,
                           "Requests answered with a final response, by outcome: completed, cancelled (by the "
                           "client), rejected (bad input), failed (engine or internal error).",
                           labelnames=[names.OUTCOME])
        self.finished = {outcome: finished.labels(outcome.value) for outcome in Outcome}
        self.spans_dropped = counter(names.TRACE_SPANS_DROPPED,
                                     "Trace spans the exporter could not deliver to the OTLP receiver (tracing on "
                                     "only: tritonserver --trace-config mode=opentelemetry).")
        self.last_record = gauge(names.LAST_RECORD_TIMESTAMP,
                                 "Unix time vLLM last reported engine stats, i.e. its last engine step with output "
                                 "(0 before the first; ages with time() - ..., growing while the engine is idle).")

    def request_finished(self, outcome: Outcome) -> None:
        self.finished[outcome].inc()

    def refresh(self) -> None:
        """Called by the publisher before it snapshots the registry."""
        self.inflight.set(self._inflight_count())
        if self._registry.last_record is not None:  # monotonic in the registry: a clock step cannot fake an age
            self.last_record.set(time.time() - (time.monotonic() - self._registry.last_record))
