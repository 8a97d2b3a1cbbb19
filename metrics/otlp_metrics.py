"""OTLP_METRICS: the instance's registry also exported over OTLP/HTTP, with exemplars that open the trace.

Triton exports no OTLP metrics and its endpoint cannot carry exemplars. With `OTLP_METRICS: "true"` in
config.pbtxt, a thread of the backend renders the same registry Triton's endpoint shows — the same family names
(counters with `_total`, as on /metrics), the same labels as attributes, histograms typed as OTLP histograms with
vLLM's explicit buckets, all cumulative — and sends it with the OpenTelemetry SDK's OTLP/HTTP exporter, which
reads the standard `OTEL_EXPORTER_OTLP_METRICS_*` (or `OTEL_EXPORTER_OTLP_*`) variables: endpoint (default
http://localhost:4318/v1/metrics), headers, timeout, compression. `OTEL_METRIC_EXPORT_INTERVAL` (ms, default
60000) sets the period. With tracing on, the time-to-first-token and end-to-end histograms carry exemplars
(metrics.exemplars).

Bounded: one snapshot is made per interval and only once the last export has returned, so a slow or absent
receiver delays exports instead of queueing them; each failed export is counted in
`vllm_triton_otlp_metric_exports_failed_total`. Off, nothing of this is built.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import Any

from ..common.owned_thread import OwnedThread
from .exemplars import ExemplarStore

DEFAULT_INTERVAL_MS = 60000  # the OpenTelemetry SDK's default for OTEL_METRIC_EXPORT_INTERVAL
SCOPE = "vllm_triton_observable"


def interval_s(env: Mapping[str, str] = os.environ) -> float:
    raw = env.get("OTEL_METRIC_EXPORT_INTERVAL", "")
    try:
        value = float(raw) / 1000 if raw else DEFAULT_INTERVAL_MS / 1000
    except ValueError:
        value = DEFAULT_INTERVAL_MS / 1000
    return max(value, 0.1)


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def metrics_data(families: Iterable[Any], constant: Mapping[str, str], resource: Any,
                 exemplars: ExemplarStore | None, start_ns: int, now_ns: int) -> Any:
    """prometheus_client's collected families as the SDK's MetricsData (cumulative, one scope)."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        Metric,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    cumulative = AggregationTemporality.CUMULATIVE
    metrics = []
    for family in families:
        created = {_key(s.labels): int(s.value * 1e9) for s in family.samples if s.name.endswith("_created")}

        def attributes(labels: Mapping[str, str]) -> dict[str, str]:
            return {**{k: v for k, v in labels.items() if k != "le"}, **constant}

        if family.type in ("counter", "gauge"):
            points = [NumberDataPoint(attributes(s.labels), created.get(_key(s.labels), start_ns), now_ns, s.value)
                      for s in family.samples if not s.name.endswith("_created")]
            if family.type == "counter":
                metrics.append(Metric(f"{family.name}_total", family.documentation, "",
                                      Sum(points, cumulative, is_monotonic=True)))
            else:
                metrics.append(Metric(family.name, family.documentation, "", Gauge(points)))
        elif family.type == "histogram":
            metrics.append(Metric(family.name, family.documentation, "",
                                  Histogram(_histogram_points(family, attributes, created, exemplars, start_ns,
                                                              now_ns), cumulative)))
    scope = ScopeMetrics(InstrumentationScope(SCOPE), metrics, schema_url="")
    return MetricsData([ResourceMetrics(resource, [scope], schema_url="")])


def _histogram_points(family: Any, attributes: Callable[[Mapping[str, str]], dict[str, str]],
                      created: dict[tuple, int], exemplars: ExemplarStore | None, start_ns: int,
                      now_ns: int) -> list[Any]:
    from opentelemetry.sdk.metrics import Exemplar
    from opentelemetry.sdk.metrics.export import HistogramDataPoint

    series: dict[tuple, dict[str, Any]] = {}
    for sample in family.samples:
        one = series.setdefault(_key(sample.labels), {"labels": sample.labels, "buckets": [], "sum": 0.0,
                                                       "count": 0})
        if sample.name.endswith("_bucket"):
            one["buckets"].append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_sum"):
            one["sum"] = sample.value
        elif sample.name.endswith("_count"):
            one["count"] = int(sample.value)
    found = [Exemplar({}, e.value, e.time_unix_nano, e.span_id, e.trace_id)
             for e in (exemplars.of(family.name) if exemplars is not None else ())]
    points = []
    for key, one in series.items():
        bounds = sorted(one["buckets"])
        cumulative = [int(count) for _, count in bounds]
        counts = [now - before for before, now in pairwise([0, *cumulative])]
        points.append(HistogramDataPoint(
            attributes(one["labels"]), created.get(key, start_ns), now_ns, one["count"], one["sum"], counts,
            [le for le, _ in bounds if le != float("inf")], min=None, max=None, exemplars=found))
    return points


class OtlpMetricsExporter:
    """The thread that sends the registry every interval; see the module's docstring."""

    def __init__(self, collect: Callable[[], Iterable[Any]], constant: Mapping[str, str],
                 resource: Mapping[str, str], exemplars: ExemplarStore | None,
                 on_export: Callable[[bool], None], exporter: Any = None,
                 env: Mapping[str, str] = os.environ) -> None:
        import logging

        from opentelemetry.sdk.resources import Resource

        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)  # failures are counted instead
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporter = OTLPMetricExporter()
        self._collect, self._constant = collect, dict(constant)
        self._resource = Resource.create(dict(resource))
        self._exemplars, self._on_export, self._exporter = exemplars, on_export, exporter
        self._interval_s = interval_s(env)
        self._start_ns = time.time_ns()
        # longer than the others: an export in progress may take the exporter's own 10-s timeout
        self._thread = OwnedThread(self._run, "vllm-otlp-metrics", join_timeout_s=15.0)
        self._stop = self._thread.stopping

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.export()

    def export(self) -> None:
        """One snapshot, sent; the outcome is counted, never raised (the exporter logs why it failed)."""
        from opentelemetry.sdk.metrics.export import MetricExportResult

        try:
            data = metrics_data(self._collect(), self._constant, self._resource, self._exemplars, self._start_ns,
                                time.time_ns())
            ok = self._exporter.export(data, timeout_millis=10_000) is MetricExportResult.SUCCESS
        except Exception:
            ok = False
        self._on_export(ok)

    def stop(self) -> None:
        """A last export of what is pending, then the exporter's shutdown; bounded by the exporter's timeout."""
        self._thread.stop()
        self.export()
        self._exporter.shutdown()
