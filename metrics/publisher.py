"""The thread that publishes an `InstanceRegistry` as Triton custom metrics.

It is the only code that calls `pb_utils.MetricFamily`/`Metric`. Each such call is an IPC round trip to the
server during which the Python stub holds the GIL (Triton 2.51's `Stub::SendMessage` does not release it), so
every call stalls vLLM's event loop too. Hence, once per interval, the registry is snapshotted with
`collect()` and only what changed is sent:

- counters: the increase since the last publish (a value lower than the last one is a reset — an engine
  restarted in place — and counts whole, so Triton's series stay monotonic);
- gauges: the value, when it changed;
- histograms: their cumulative `<name>_bucket{le}`, `<name>_sum` and `<name>_count` series, as Triton counters
  (exactly what a Prometheus histogram exposes; a native Triton histogram would need one round trip per
  observation). Names and `le` strings equal vLLM's own exposition, so every vLLM dashboard works unchanged.

Every series is created at its first publish, so every family is on /metrics before any traffic. A family or
series Triton refuses is reported once and skipped. References are released in `stop()`: Triton 2.51's stub
can crash if metric objects outlive `finalize()`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .errors import MetricErrors
from .registry import InstanceRegistry, Kind

_SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


class TritonPublisher:
    def __init__(
        self,
        registry: InstanceRegistry,
        pb_utils: Any,
        errors: MetricErrors,
        interval_s: float = 1.0,
        before_flush: Callable[[], None] | None = None,
    ) -> None:
        self._registry = registry
        self._pb = pb_utils
        self._errors = errors
        self._interval_s = interval_s
        self._before_flush = before_flush
        self._families: dict[str, Any] = {}
        self._metrics: dict[_SeriesKey, Any] = {}
        self._last: dict[_SeriesKey, float] = {}
        self._refused: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.flush()

    def flush(self) -> None:
        """Publish what changed; a failure is counted and publishing goes on at the next interval."""
        with self._lock:
            try:
                if self._before_flush is not None:
                    self._before_flush()
                self._publish_snapshot()
            except Exception as exc:
                self._errors.report("publish", exc)

    def _publish_snapshot(self) -> None:
        constant = self._registry.constant_labels
        for family in self._registry.collect():
            kind = Kind.GAUGE if family.type == "gauge" else Kind.COUNTER
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                last = self._last.get(key)
                if last is not None and sample.value == last:
                    continue
                metric = self._metric(key, sample.name, kind, {**sample.labels, **constant}, family.documentation)
                if metric is None:
                    continue
                if kind is Kind.GAUGE:
                    metric.set(sample.value)
                else:
                    previous = last or 0.0
                    increase = sample.value - previous if sample.value >= previous else sample.value  # a reset
                    if increase > 0:
                        metric.increment(increase)
                self._last[key] = sample.value

    def _family(self, name: str, kind: Kind, documentation: str) -> Any:
        family = self._families.get(name)
        if family is None:
            triton_kind = self._pb.MetricFamily.GAUGE if kind is Kind.GAUGE else self._pb.MetricFamily.COUNTER
            family = self._pb.MetricFamily(name=name, description=documentation or name, kind=triton_kind)
            self._families[name] = family
        return family

    def _metric(self, key: _SeriesKey, name: str, kind: Kind, labels: dict[str, str], documentation: str) -> Any:
        metric = self._metrics.get(key)
        if metric is None and name not in self._refused:
            try:
                metric = self._family(name, kind, documentation).Metric(labels=labels)
            except Exception as exc:  # refused by Triton: reported once, skipped from now on
                self._refused.add(name)
                self._errors.report("publish", RuntimeError(f"Triton refused metric {name} ({kind.value}): {exc}"),
                                    kind=f"refused {name}")
                return None
            self._metrics[key] = metric
        return metric

    def stop(self) -> None:
        """Publish what is pending, then drop every Triton metric object (before the stub exits)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.flush()
        with self._lock:
            self._metrics.clear()
            self._families.clear()
