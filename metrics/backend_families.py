"""The backend's own families (`vllm_triton_` prefix: no colon, which Prometheus reserves for recording rules)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from metrics.local import Kind, MetricStore, bound_classes

OUTCOMES = ("completed", "cancelled", "rejected", "failed")
INFO_NAME = "vllm_triton_info"
INFO_HELP = "Backend build and switches; always 1."


@dataclass(frozen=True)
class BackendInfo:
    vllm_version: str
    backend_version: str
    metrics_enabled: bool
    health_check_enabled: bool


class BackendFamilies:
    """Info, request outcomes and the exporter's own health; gauges are refreshed before each publish."""

    def __init__(self, store: MetricStore, constant_labels: dict[str, str], info: BackendInfo,
                 inflight_count: Callable[[], int]) -> None:
        classes = bound_classes(store, constant_labels)
        gauge, counter = classes[Kind.GAUGE], classes[Kind.COUNTER]
        self._store = store
        self._inflight_count = inflight_count
        gauge(INFO_NAME, INFO_HELP,
              labelnames=["vllm_version", "backend_version", "metrics_enabled", "health_check_enabled"]).labels(
            info.vllm_version, info.backend_version, str(info.metrics_enabled).lower(),
            str(info.health_check_enabled).lower()).set(1)
        self.inflight = gauge("vllm_triton_requests_in_flight",
                              "Requests accepted by this model instance and not yet answered with a final response.")
        finished = counter("vllm_triton_requests_finished",
                           "Requests answered with a final response, by outcome: completed, cancelled (by the "
                           "client), rejected (bad input), failed (engine or internal error).",
                           labelnames=["outcome"])
        self.finished = {outcome: finished.labels(outcome) for outcome in OUTCOMES}
        self.pending = gauge("vllm_triton_metrics_pending_updates",
                             "Histogram observations waiting to be published at the last publish.")
        self.dropped = counter("vllm_triton_metrics_dropped_updates",
                               "Metric updates dropped because the pending buffer was full.")
        self.since_record = gauge("vllm_triton_metrics_seconds_since_last_record",
                                  "Seconds since vLLM last reported engine stats (grows while the engine is idle).")
        self._dropped_published = 0

    def request_finished(self, outcome: str) -> None:
        self.finished[outcome].inc()

    def refresh(self) -> None:
        """Called by the publisher before it drains the store."""
        store = self._store
        self.inflight.set(self._inflight_count())
        self.pending.set(store.pending_observations)
        dropped = store.dropped_updates
        self.dropped.inc(dropped - self._dropped_published)
        self._dropped_published = dropped
        if store.last_record is not None:
            self.since_record.set(time.monotonic() - store.last_record)
