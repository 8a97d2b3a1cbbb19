"""The thread that publishes a `MetricStore` as Triton custom metrics.

It is the only code that calls `pb_utils.MetricFamily`/`Metric` (each call is an IPC round trip to the
server), a few times a second, off vLLM's event loop. A family Triton refuses is reported once and skipped,
never silently dropped. References are released in `stop()`: Triton 2.51's stub can crash if metric objects
outlive `finalize()`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from metrics.local import FamilySpec, Kind, MetricStore, Series


class TritonPublisher:
    def __init__(
        self,
        store: MetricStore,
        pb_utils: Any,
        log_error: Callable[[str], None],
        interval_s: float = 0.5,
        before_flush: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._pb = pb_utils
        self._log_error = log_error
        self._interval_s = interval_s
        self._before_flush = before_flush
        self._families: dict[str, Any] = {}
        self._metrics: dict[int, Any] = {}
        self._refused: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.flush()

    def flush(self) -> None:
        if self._before_flush is not None:
            self._before_flush()
        for series, value, observations in self._store.drain():
            metric = self._metric(series)
            if metric is None:
                continue
            kind = series.family.kind
            if kind is Kind.COUNTER:
                if value > 0:
                    metric.increment(value)
            elif kind is Kind.GAUGE:
                metric.set(value)
            else:
                for observation in observations:
                    metric.observe(observation)

    def _family(self, spec: FamilySpec) -> Any:
        family = self._families.get(spec.name)
        if family is None and spec.name not in self._refused:
            kind = {Kind.COUNTER: self._pb.MetricFamily.COUNTER, Kind.GAUGE: self._pb.MetricFamily.GAUGE,
                    Kind.HISTOGRAM: self._pb.MetricFamily.HISTOGRAM}[spec.kind]
            try:
                family = self._pb.MetricFamily(name=spec.name, description=spec.documentation or spec.name,
                                               kind=kind)
            except Exception as exc:
                self._refused.add(spec.name)
                self._log_error(f"metric family {spec.name} ({spec.kind.value}) cannot be published: {exc}")
                return None
            self._families[spec.name] = family
        return family

    def _metric(self, series: Series) -> Any:
        metric = self._metrics.get(id(series))
        if metric is None:
            family = self._family(series.family)
            if family is None:
                return None
            try:
                if series.family.kind is Kind.HISTOGRAM:
                    metric = family.Metric(labels=series.labels, buckets=list(series.family.buckets))
                else:
                    metric = family.Metric(labels=series.labels)
            except Exception as exc:
                self._refused.add(series.family.name)
                self._log_error(f"metric {series.family.name}{series.labels} cannot be published: {exc}")
                return None
            self._metrics[id(series)] = metric
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
