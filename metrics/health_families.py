"""The health monitor's report as metrics (`vllm_triton_engine_*`), in the instance's registry.

Implements `health.ports.Report` (structurally: this room does not import the health room).
"""

from __future__ import annotations

from ..common.vocabulary import HealthState
from . import names
from .registry import InstanceRegistry, Kind

PROBE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class HealthFamilies:
    def __init__(self, registry: InstanceRegistry) -> None:
        classes = registry.classes()
        gauge, counter, histogram = classes[Kind.GAUGE], classes[Kind.COUNTER], classes[Kind.HISTOGRAM]
        self._healthy = gauge(names.ENGINE_HEALTHY,
                              "1 while the engine serves requests (healthy or degraded), 0 while it is unhealthy.")
        state = gauge(names.ENGINE_HEALTH_STATE,
                      "1 for the current health state (healthy, degraded, unhealthy), 0 for the others.",
                      labelnames=[names.STATE])
        self._states = {s: state.labels(s.value) for s in HealthState}
        self._probe_latency = histogram(names.ENGINE_PROBE_LATENCY, "Round-trip time of the active engine probe.",
                                        buckets=PROBE_BUCKETS)
        self._failures = gauge(names.ENGINE_PROBE_FAILURES,
                               "Engine probes that failed in a row (0 after a successful probe).")
        self._restarts = counter(names.ENGINE_RESTARTS, "Engines replaced in place by HEALTH_RECOVERY=restart.")
        self.update(HealthState.HEALTHY, 0)

    def update(self, state: HealthState, failures: int) -> None:
        self._healthy.set(0 if state is HealthState.UNHEALTHY else 1)
        for s, child in self._states.items():
            child.set(1 if s is state else 0)
        self._failures.set(failures)

    def probe_latency(self, seconds: float) -> None:
        self._probe_latency.observe(seconds)

    def restarted(self) -> None:
        self._restarts.inc()
