"""Health as metrics (`vllm_triton_engine_*`), in the same registry as the other families."""

from __future__ import annotations

from health.evaluator import State
from metrics.registry import InstanceRegistry, Kind

PROBE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class HealthFamilies:
    def __init__(self, registry: InstanceRegistry) -> None:
        classes = registry.classes()
        gauge, counter, histogram = classes[Kind.GAUGE], classes[Kind.COUNTER], classes[Kind.HISTOGRAM]
        self.healthy = gauge("vllm_triton_engine_healthy",
                             "1 while the engine serves requests (healthy or degraded), 0 while it is unhealthy.")
        state = gauge("vllm_triton_engine_health_state",
                      "1 for the current health state (healthy, degraded, unhealthy), 0 for the others.",
                      labelnames=["state"])
        self.states = {s: state.labels(s.value) for s in State}
        self.probe_latency = histogram("vllm_triton_engine_probe_latency_seconds",
                                       "Round-trip time of the active engine probe.", buckets=PROBE_BUCKETS)
        self.failures = gauge("vllm_triton_engine_probe_consecutive_failures",
                              "Engine probes that failed in a row (0 after a successful probe).")
        self.since_progress = gauge("vllm_triton_engine_seconds_since_progress",
                                    "Seconds without an engine step while requests are in flight (0 when idle).")
        self.restarts = counter("vllm_triton_engine_restarts",
                                "Engines replaced in place by HEALTH_RECOVERY=restart.")
        self.update(State.HEALTHY, 0, 0.0)

    def update(self, state: State, failures: int, stalled_for: float) -> None:
        self.healthy.set(0 if state is State.UNHEALTHY else 1)
        for s, child in self.states.items():
            child.set(1 if s is state else 0)
        self.failures.set(failures)
        self.since_progress.set(stalled_for)
