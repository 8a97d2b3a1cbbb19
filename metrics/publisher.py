"""The thread that publishes a `MetricStore` as Triton custom metrics.

It is the only code that calls `pb_utils.MetricFamily`/`Metric`. Each such call is an IPC round trip to the
server during which the Python stub holds the GIL (Triton 2.51's `Stub::SendMessage` does not release it), so
every call stalls vLLM's event loop too. Hence:

- counters and gauges: at most one call per changed series per publish;
- histograms: published as the cumulative `<name>_bucket{le}`, `<name>_sum` and `<name>_count` series (Triton
  counters, exactly what a Prometheus histogram exposes), each incremented once per publish by the number of
  new observations — a native Triton histogram would need one `observe()` round trip per observation (one per
  generated token for inter-token latency). Values and names equal vLLM's own exposition, `le` strings
  included, so `histogram_quantile` and every vLLM dashboard work unchanged.

A family Triton refuses is reported once and skipped, never silently dropped. References are released in
`stop()`: Triton 2.51's stub can crash if metric objects outlive `finalize()`.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from typing import Any

from metrics.local import Kind, MetricStore, Series, le_label

INF = float("inf")


class TritonPublisher:
    def __init__(
        self,
        store: MetricStore,
        pb_utils: Any,
        log_error: Callable[[str], None],
        interval_s: float = 1.0,
        before_flush: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._pb = pb_utils
        self._log_error = log_error
        self._interval_s = interval_s
        self._before_flush = before_flush
        self._families: dict[str, Any] = {}
        self._metrics: dict[tuple[int, str], Any] = {}
        self._refused: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.flush()
            except Exception as exc:  # a failed update must not end publishing for good
                self._log_error(f"publishing metrics failed: {type(exc).__name__}: {exc}")

    def flush(self) -> None:
        if self._before_flush is not None:
            self._before_flush()
        for series, value, observations in self._store.drain():
            kind = series.family.kind
            if kind is Kind.HISTOGRAM:
                self._publish_histogram(series, observations)
                continue
            metric = self._metric(series, series.family.name, kind, series.labels)
            if metric is None:
                continue
            if kind is Kind.COUNTER:
                if value > 0:
                    metric.increment(value)
            else:
                metric.set(value)

    def _publish_histogram(self, series: Series, observations: list[float]) -> None:
        spec = series.family
        bounds = [*spec.buckets, INF]
        per_bucket = [0] * len(bounds)
        for observation in observations:
            per_bucket[bisect.bisect_left(bounds, observation)] += 1
        cumulative = 0
        for bound, count in zip(bounds, per_bucket, strict=True):
            cumulative += count
            metric = self._metric(series, f"{spec.name}_bucket", Kind.COUNTER,
                                  {**series.labels, "le": le_label(bound)}, spec.documentation)
            if metric is not None and cumulative:
                metric.increment(cumulative)
        total = sum(observations)
        for suffix, amount in (("_sum", total), ("_count", len(observations))):
            metric = self._metric(series, spec.name + suffix, Kind.COUNTER, series.labels, spec.documentation)
            if metric is not None and amount > 0:
                metric.increment(amount)

    def _family(self, name: str, kind: Kind, documentation: str) -> Any:
        family = self._families.get(name)
        if family is None and name not in self._refused:
            triton_kind = {Kind.COUNTER: self._pb.MetricFamily.COUNTER, Kind.GAUGE: self._pb.MetricFamily.GAUGE}[kind]
            try:
                family = self._pb.MetricFamily(name=name, description=documentation or name, kind=triton_kind)
            except Exception as exc:
                self._refused.add(name)
                self._log_error(f"metric family {name} ({kind.value}) cannot be published: {exc}")
                return None
            self._families[name] = family
        return family

    def _metric(self, series: Series, name: str, kind: Kind, labels: dict[str, str],
                documentation: str | None = None) -> Any:
        key = (id(series), name if "le" not in labels else f"{name}{{le={labels['le']}}}")
        metric = self._metrics.get(key)
        if metric is None:
            family = self._family(name, kind, series.family.documentation if documentation is None
                                  else documentation)
            if family is None:
                return None
            try:
                metric = family.Metric(labels=labels)
            except Exception as exc:
                self._refused.add(name)
                self._log_error(f"metric {name}{labels} cannot be published: {exc}")
                return None
            self._metrics[key] = metric
        return metric

    def stop(self) -> None:
        """Publish what is pending, then drop every Triton metric object (before the stub exits)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        try:
            self.flush()
        except Exception as exc:
            self._log_error(f"final metrics flush failed: {exc}")
        self._metrics.clear()
        self._families.clear()

