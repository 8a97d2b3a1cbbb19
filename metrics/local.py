"""Metric classes with prometheus_client's API that only accumulate updates in memory.

vLLM calls `record()` on its event loop once per engine step. A Triton metric update is a blocking IPC round
trip to the server, so these classes never talk to Triton: they add to plain accumulators that the publisher
thread drains. Counters and gauges take O(1) memory per series; histogram observations wait in a bounded
buffer whose overflow is counted, never unbounded.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# prometheus_client.Histogram's buckets when none are given.
PROMETHEUS_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


def le_label(bound: float) -> str:
    """A bucket bound as prometheus_client (hence vLLM's own /metrics) writes it: 1.0, 2.5, +Inf."""
    from prometheus_client.utils import floatToGoString

    return floatToGoString(bound)


def exposed_name(name: str, kind: Kind) -> str:
    """The name prometheus_client exposes: a counter `x` is `x_total` (a `_total` suffix is not doubled)."""
    if kind is Kind.COUNTER and not name.endswith("_total"):
        return name + "_total"
    return name


@dataclass(frozen=True)
class FamilySpec:
    """One metric family as exposed: the single source for docs, dashboards, alerts and tests."""

    name: str
    kind: Kind
    documentation: str
    labelnames: tuple[str, ...]
    buckets: tuple[float, ...] = ()

    @property
    def sample_names(self) -> tuple[str, ...]:
        """The series names on /metrics (a histogram is its _bucket, _sum and _count series)."""
        if self.kind is Kind.HISTOGRAM:
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


@dataclass(eq=False)
class Series:
    family: FamilySpec
    labels: dict[str, str]
    pending: float = 0.0  # counter: increments not yet published; gauge: latest value
    dirty: bool = True  # published at least once, so every series shows up before any traffic
    observations: list[float] = field(default_factory=list)


class MetricStore:
    """All families and series of one model instance, shared by the engine loop and the publisher."""

    def __init__(self, max_pending_observations: int = 200_000) -> None:
        self.lock = threading.Lock()
        self.families: dict[str, FamilySpec] = {}
        self.series: list[Series] = []
        self._series_index: dict[tuple[str, frozenset[tuple[str, str]]], Series] = {}
        self.max_pending_observations = max_pending_observations
        self.pending_observations = 0
        self.dropped_updates = 0
        self.last_record: float | None = None

    def add_family(self, spec: FamilySpec) -> None:
        with self.lock:
            self.families.setdefault(spec.name, spec)

    def add_series(self, family: FamilySpec, labels: dict[str, str]) -> Series:
        """The series for these labels; an engine restarted in place continues the same series."""
        key = (family.name, frozenset(labels.items()))
        with self.lock:
            series = self._series_index.get(key)
            if series is None:
                series = self._series_index[key] = Series(family, labels)
                self.series.append(series)
            return series

    def inc(self, series: Series, value: float) -> None:
        with self.lock:
            series.pending += value
            series.dirty = True

    def set(self, series: Series, value: float) -> None:
        with self.lock:
            series.pending = value
            series.dirty = True

    def observe(self, series: Series, value: float) -> None:
        with self.lock:
            if self.pending_observations >= self.max_pending_observations:
                self.dropped_updates += 1
                return
            series.observations.append(value)
            series.dirty = True
            self.pending_observations += 1

    def drain(self) -> list[tuple[Series, float, list[float]]]:
        """Take every pending update: (series, counter delta or gauge value, histogram observations)."""
        with self.lock:
            taken = []
            for series in self.series:
                if series.dirty:
                    taken.append((series, series.pending, series.observations))
                    if series.family.kind is Kind.COUNTER:
                        series.pending = 0.0
                    series.observations = []
                    series.dirty = False
            self.pending_observations = 0
            return taken


class _LocalMetric:
    """A family (unlabelled object) or, after `.labels()`, one series — like prometheus_client."""

    kind: Kind

    def __init__(self, store: MetricStore, constant_labels: dict[str, str], name: str, documentation: str = "",
                 labelnames: Iterable[str] = (), buckets: Iterable[float] = (), **_ignored: Any) -> None:
        labelnames = tuple(labelnames)
        if self.kind is Kind.HISTOGRAM and not buckets:
            buckets = PROMETHEUS_DEFAULT_BUCKETS
        bucket_list = tuple(float(b) for b in buckets if b != float("inf"))
        self.spec = FamilySpec(
            exposed_name(name, self.kind), self.kind, documentation,
            (*labelnames, *constant_labels), bucket_list,
        )
        self._store = store
        self._constant = constant_labels
        self._labelnames = labelnames
        self._children: dict[tuple[str, ...], _LocalMetric] = {}
        self._series: Series | None = None
        store.add_family(self.spec)
        if not labelnames:
            self._series = store.add_series(self.spec, dict(constant_labels))

    def labels(self, *values: Any, **kwvalues: Any) -> _LocalMetric:
        key = tuple(str(v) for v in values) if values else tuple(str(kwvalues[n]) for n in self._labelnames)
        if len(key) != len(self._labelnames):
            raise ValueError(f"{self.spec.name}: expected labels {self._labelnames}, got {key}")
        child = self._children.get(key)
        if child is None:
            child = object.__new__(type(self))
            child.spec, child._store = self.spec, self._store
            labels = {**dict(zip(self._labelnames, key, strict=True)), **self._constant}
            child._series = self._store.add_series(self.spec, labels)
            self._children[key] = child
        return child


class LocalCounter(_LocalMetric):
    kind = Kind.COUNTER

    def inc(self, amount: float = 1.0) -> None:
        if amount:
            self._store.inc(self._series, amount)


class LocalGauge(_LocalMetric):
    kind = Kind.GAUGE

    def set(self, value: float) -> None:
        self._store.set(self._series, value)

    def set_to_current_time(self) -> None:
        self.set(time.time())


class LocalHistogram(_LocalMetric):
    kind = Kind.HISTOGRAM

    def observe(self, value: float) -> None:
        self._store.observe(self._series, value)


def bound_classes(store: MetricStore, constant_labels: dict[str, str]) -> dict[Kind, type]:
    """Classes whose constructor has prometheus_client's signature, bound to one store and label set."""

    def bind(base: type) -> type:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            base.__init__(self, store, constant_labels, *args, **kwargs)

        return type(base.__name__, (base,), {"__init__": __init__})

    return {Kind.COUNTER: bind(LocalCounter), Kind.GAUGE: bind(LocalGauge), Kind.HISTOGRAM: bind(LocalHistogram)}
