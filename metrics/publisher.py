"""The thread that publishes an `InstanceRegistry` as Triton custom metrics.

It is the only code that calls `pb_utils.MetricFamily`/`Metric`. Each call is a synchronous IPC round trip to
the server (≈ 30 µs on an idle core here, several times that on busy ones), so nothing of this runs on vLLM's
event loop. The registry is snapshotted and only what changed is sent once per interval, and soon after
`changed()` says requests finished — so a finished request is on /metrics within milliseconds, as with the
official backend. Those publishes are coalesced: the thread's CPU time is held to DUTY of one core by a budget
that refills with time and holds at most BURST_CPU_S; while the budget lasts a publish follows the last one after
MIN_GAP_S, and once it is spent the thread rests until it is back, never more than the interval. A request's end
asks twice (vLLM's record of its last step, then the backend's count of its outcome): after a quiet spell both are
published at once, however busy the machine makes each publish; under sustained traffic the budget, not the
traffic, sets the rate. Sent as Triton's three kinds:

- counters: the increase since the last publish (a value lower than the last one is a reset — an engine
  restarted in place — and counts whole, so Triton's series stay monotonic);
- gauges: the change, sent as `increment(delta)`, because Triton 2.51's `Metric.set()` holds the GIL during its
  round trip and so stalls the event loop, while `increment()` and `observe()` release it. The value Triton then
  holds is tracked here with the same float additions; where rounding left it off by an ulp, one `set()` mends it;
- histograms: HISTOGRAM families with vLLM's buckets; each interval's change is replayed with `observe()` bucket
  by bucket (metrics.histogram), so `_count`, every `_bucket{le}` and `_sum` equal vLLM's own exposition. A
  family named in `as_series` (the per-token ones when PER_TOKEN_HISTOGRAMS is "series", whose replay costs a
  round trip per token) is published as its `_bucket{le}`, `_sum` and `_count` counter series instead.

Every series is created at its first publish, so every family is on /metrics before any traffic. A family or
series Triton refuses is reported once and skipped. What publishing costs (calls, wall and CPU time) is handed
to `on_cost` after each flush. References are released in `stop()`: Triton 2.51's stub can crash if metric
objects outlive `finalize()`. With a `lease` (metrics.series_lease), nothing is created or written in Triton while
another load of the same instance holds it (a reload), and it is released once every series is deleted.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from ..common.owned_thread import OwnedThread
from .errors import MetricErrors
from .histogram import BucketState, ReplayableHistogram, replay
from .registry import InstanceRegistry, Kind
from .series_lease import SeriesLease

_SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
MIN_GAP_S = 0.01  # changes within this long after a publish wait for the next one (coalesced)
# publishing takes at most about this share of one core (CPU time) when requests keep finishing: the stub's GIL
# is shared with vLLM's event loop, and metrics on may cost serving no more than 2 %
DUTY = 0.02
# The CPU time publishes may take back to back after a quiet spell: a few publishes even on a busy machine (one
# took 5-8 ms of CPU on two loaded cores), so that a request's two asks are published at once.
BURST_CPU_S = 0.02


@dataclass
class PublishCost:
    """One flush: Triton calls by operation (observe, increment, set), and the publisher thread's time."""

    calls: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    cpu_s: float = 0.0


class TritonPublisher:
    def __init__(
        self,
        registry: InstanceRegistry,
        pb_utils: Any,
        errors: MetricErrors,
        interval_s: float = 1.0,
        before_flush: Callable[[], None] | None = None,
        as_series: Collection[str] = (),
        on_cost: Callable[[PublishCost], None] | None = None,
        lease: SeriesLease | None = None,
    ) -> None:
        self._registry = registry
        self._pb = pb_utils
        self._errors = errors
        self._interval_s = interval_s
        self._before_flush = before_flush
        self._as_series = frozenset(as_series)
        self._on_cost = on_cost
        self._lease = lease
        self._families: dict[str, Any] = {}
        self._metrics: dict[_SeriesKey, Any] = {}
        self._last: dict[_SeriesKey, float] = {}  # counters: the last value seen; gauges: the value Triton holds
        self._replayed: dict[_SeriesKey, tuple[ReplayableHistogram, BucketState]] = {}
        self._refused: set[str] = set()
        self._cost = PublishCost()
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._budget_s = BURST_CPU_S  # the CPU time publishing may spend now (gap_s)
        self._budget_at = time.monotonic()
        self._thread = OwnedThread(self._run, "vllm-metrics", wake=self._changed.set)
        self._stop = self._thread.stopping

    def start(self) -> None:
        self._thread.start()

    def changed(self) -> None:
        """Requests finished: publish soon (from any thread, vLLM's event loop included; it does not wait)."""
        self._changed.set()

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            self._changed.wait(max(0.0, last + self._interval_s - time.monotonic()))
            self._changed.clear()  # a change from here on is seen by the next publish
            if self._stop.is_set():
                return
            last = time.monotonic()
            self.flush()
            if self._stop.wait(self.gap_s()):
                return

    def gap_s(self) -> float:
        """How long the thread rests after a publish: MIN_GAP_S while the CPU budget lasts, else until it is back
        to zero, at most the interval. The budget refills at DUTY of a second per second, up to BURST_CPU_S, and
        each publish spends its CPU time. (CPU, not wall time: Triton's calls wait for the server with the GIL
        released.)"""
        now = time.monotonic()
        refilled = self._budget_s + DUTY * (now - self._budget_at)
        self._budget_s, self._budget_at = min(BURST_CPU_S, refilled) - self._cost.cpu_s, now
        return min(self._interval_s, max(MIN_GAP_S, -self._budget_s / DUTY))

    def flush(self) -> None:
        """Publish what changed; a failure is counted and publishing goes on at the next interval."""
        with self._lock:
            if self._lease is not None and not self._lease.try_acquire():
                return  # an earlier load of this instance still publishes these series
            wall, cpu = time.perf_counter(), time.thread_time()
            self._cost = PublishCost()
            try:
                if self._before_flush is not None:
                    self._before_flush()
                self._publish_snapshot()
                self._publish_histograms()
            except Exception as exc:
                self._errors.report("publish", exc)
            self._cost.wall_s, self._cost.cpu_s = time.perf_counter() - wall, time.thread_time() - cpu
            if self._on_cost is not None:
                try:
                    self._on_cost(self._cost)
                except Exception as exc:
                    self._errors.report("publish", exc)

    def _publish_snapshot(self) -> None:
        """Counters and gauges, and the histograms published as their series."""
        constant = self._registry.constant_labels
        for family in self._registry.collect():
            if family.type == "histogram" and family.name not in self._as_series:
                continue  # a Triton histogram: _publish_histograms
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
                    self._set_gauge(key, metric, last or 0.0, sample.value)
                else:
                    previous = last or 0.0
                    increase = sample.value - previous if sample.value >= previous else sample.value  # a reset
                    if increase > 0:
                        self._call(metric.increment, "increment", increase)
                    self._last[key] = sample.value

    def _set_gauge(self, key: _SeriesKey, metric: Any, held: float, value: float) -> None:
        """Move Triton's gauge from `held` to `value` with increment() (GIL released), set() only to mend rounding."""
        if math.isfinite(held) and math.isfinite(value):
            reached = held + (value - held)  # what Triton's own addition gives
            self._call(metric.increment, "increment", value - held)
        else:
            reached = math.nan
        if reached != value:
            self._call(metric.set, "set", value)
        self._last[key] = value

    def _publish_histograms(self) -> None:
        constant = self._registry.constant_labels
        for name, documentation, histogram in self._registry.histograms():
            if name in self._as_series:
                continue
            bounds = histogram.upper_bounds
            for labels, child in histogram.children():
                key = (name, tuple(sorted(labels.items())))
                state = child.bucket_state()
                last = self._replayed.get(key)
                same_series = last is not None and last[0] is child  # else new, or created anew by a restart
                if same_series and last[1] == state:
                    continue
                metric = self._metric(key, name, Kind.HISTOGRAM, {**labels, **constant}, documentation,
                                      buckets=list(bounds[:-1]))
                if metric is None:
                    continue
                previous = last[1] if same_series else BucketState.empty(len(bounds))
                # recorded first: a replay that fails half-way is not sent again (Triton's histogram may lag
                # vLLM's by what failed, but never counts an observation twice)
                self._replayed[key] = (child, state)
                for value, times in replay(previous, state, bounds):
                    for _ in range(times):
                        self._call(metric.observe, "observe", value)

    def _call(self, method: Callable[[float], None], operation: str, value: float) -> None:
        method(value)
        self._cost.calls[operation] += 1

    def _family(self, name: str, kind: Kind, documentation: str) -> Any:
        family = self._families.get(name)
        if family is None:
            triton_kind = {Kind.GAUGE: self._pb.MetricFamily.GAUGE, Kind.COUNTER: self._pb.MetricFamily.COUNTER,
                           Kind.HISTOGRAM: self._pb.MetricFamily.HISTOGRAM}[kind]
            family = self._pb.MetricFamily(name=name, description=documentation or name, kind=triton_kind)
            self._families[name] = family
        return family

    def _metric(self, key: _SeriesKey, name: str, kind: Kind, labels: dict[str, str], documentation: str,
                **options: Any) -> Any:
        metric = self._metrics.get(key)
        if metric is None and name not in self._refused:
            try:
                metric = self._family(name, kind, documentation).Metric(labels=labels, **options)
            except Exception as exc:  # refused by Triton: reported once, skipped from now on
                self._refused.add(name)
                self._errors.report("publish", RuntimeError(f"Triton refused metric {name} ({kind.value}): {exc}"),
                                    kind=f"refused {name}")
                return None
            self._metrics[key] = metric
        return metric

    def stop(self) -> None:
        """Publish what is pending, then drop every Triton metric object (before the stub exits), then the lease."""
        self._thread.stop()
        self.flush()
        with self._lock:
            self._metrics.clear()
            self._families.clear()
            self._replayed.clear()
            if self._lease is not None:
                self._lease.release()
