"""A private `prometheus_client` registry per model instance, and metric classes bound to it.

vLLM's stat logger and the backend's families create real `prometheus_client` metrics (the full API:
`inc/dec/set/observe/labels/remove/set_function/...`, bucketing at observe time, thread-safe), registered in
this instance's own `CollectorRegistry` instead of the process-wide one. Nothing here talks to Triton: the
publisher thread snapshots the registry with `collect()` and sends the changes, so the cost of a publish depends
on the number of series, never on traffic.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from .histogram import ReplayableHistogram
from .official_names import ALIASES, renamed


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


def le_label(bound: float) -> str:
    """A bucket bound as prometheus_client (hence vLLM's own /metrics) writes it: 1.0, 2.5, +Inf."""
    from prometheus_client.utils import floatToGoString

    return floatToGoString(bound)


def triton_le_label(bound: float) -> str:
    """The same bound as Triton's exposition writes it (prometheus-cpp's `%.16g`: 1 and 1000000 where vLLM writes
    1.0 and 1000000.0; seen on Triton 2.51).

    Prometheus 3 normalizes `le` to vLLM's form when it scrapes; Prometheus 2 stores what it reads, so queries
    that pick one bucket match both spellings (observability.promql.le_matcher).
    """
    return "+Inf" if bound == float("inf") else f"{bound:.16g}"


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


_BASES: dict[Kind, type] = {Kind.COUNTER: Counter, Kind.GAUGE: Gauge, Kind.HISTOGRAM: ReplayableHistogram}


class InstanceRegistry(CollectorRegistry):
    """The metrics of one model instance; `constant_labels` (Triton's model, version, instance) are added when
    publishing, and `specs` describes every family for the catalogue."""

    def __init__(self, constant_labels: dict[str, str]) -> None:
        super().__init__()
        self.constant_labels = dict(constant_labels)
        self.specs: dict[str, FamilySpec] = {}

    def register(self, collector: Any) -> None:
        """A name registered again replaces the old collector: an engine restarted in place creates its metrics
        anew (the publisher sees the new, lower counter values as a reset and keeps Triton's series monotonic)."""
        names = set(self._get_names(collector))
        with self._lock:
            stale = {c for name, c in self._names_to_collectors.items() if name in names}
        for old in stale:
            self.unregister(old)
        super().register(collector)

    def describe(self, metric: Any, kind: Kind) -> None:
        buckets = tuple(b for b in getattr(metric, "_upper_bounds", ()) if b != float("inf"))
        spec = FamilySpec(exposed_name(metric._name, kind), kind, metric._documentation,
                          (*metric._labelnames, *self.constant_labels), buckets)
        self.specs[spec.name] = spec
        alias = ALIASES.get(spec.name)
        if alias is not None:
            self.specs[alias.name] = replace(spec, name=alias.name, documentation=alias.documentation)

    def collect(self) -> Iterator[Any]:
        """Every family, and each aliased family once more under its alias (official_names.py)."""
        for family in super().collect():
            yield family
            alias = ALIASES.get(family.name)
            if alias is not None:
                yield renamed(family, alias)

    def buckets(self, family: str) -> tuple[float, ...]:
        """A family's finite bucket bounds; () for a family this registry does not have."""
        spec = self.specs.get(family)
        return spec.buckets if spec is not None else ()

    def histograms(self) -> Iterator[tuple[str, str, ReplayableHistogram]]:
        """(family name, documentation, histogram) of every histogram, and of each aliased one under its alias."""
        with self._lock:
            collectors = list(self._collector_to_names)
        for collector in collectors:
            if isinstance(collector, ReplayableHistogram):
                yield collector._name, collector._documentation, collector
                alias = ALIASES.get(collector._name)
                if alias is not None:
                    yield alias.name, alias.documentation, collector

    def classes(self) -> dict[Kind, type]:
        """prometheus_client's Counter, Gauge and Histogram, registering in this registry by default."""
        return {kind: _bind(base, kind, self) for kind, base in _BASES.items()}


def _bind(base: type, kind: Kind, registry: InstanceRegistry) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        parent = not kwargs.get("_labelvalues")
        if parent:
            kwargs["registry"] = registry
        base.__init__(self, *args, **kwargs)
        if parent:
            registry.describe(self, kind)

    return type(base.__name__, (base,), {"__init__": __init__})

