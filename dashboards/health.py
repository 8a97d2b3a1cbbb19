"""Health and exporter: engine health states, probes, restarts, and the metrics pipeline itself."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import dashboard, row
from dashboards.panels import graph
from observability.config import Config, DashboardUID
from observability.promql import TRITON, age, quantile, sel, sum_rate
from vllm_triton_observable.metrics import names

UID = DashboardUID.HEALTH


def build(config: Config, slo_buckets: dict[str, tuple[float, ...]]) -> Dashboard:
    board = dashboard(UID, "vLLM on Triton / Health and exporter", "Engine health monitor and the metrics "
                      "exporter (generated).", config, slo_buckets)
    return (
        board.with_row(row("Engine health"))
        .with_panel(graph("Engine healthy", "1 while the engine serves requests, 0 while unhealthy "
                          "(per model instance).", "none",
                          (sel(names.ENGINE_HEALTHY, TRITON), "{{model_instance}}"),
                          thresholds=[(None, "red"), (1, "green")]))
        .with_panel(graph("Health state", "Which state each instance is in (healthy, degraded, unhealthy).", "none",
                          (f"max by ({names.MODEL_INSTANCE}, {names.STATE}) "
                           f"({sel(names.ENGINE_HEALTH_STATE, TRITON)}) == 1",
                           "{{model_instance}} {{state}}")))
        .with_panel(graph("Probe latency", "p50 and p99 of the active engine probe's round trip.", "s",
                          (quantile(0.5, names.ENGINE_PROBE_LATENCY, TRITON), "p50"),
                          (quantile(0.99, names.ENGINE_PROBE_LATENCY, TRITON), "p99"), span=8))
        .with_panel(graph("Consecutive probe failures", "Probes failed in a row per instance.", "short",
                          (sel(names.ENGINE_PROBE_FAILURES, TRITON), "{{model_instance}}"),
                          span=8))
        .with_panel(graph("Seconds since engine progress", "Seconds without an engine step while requests are "
                          "in flight (about 0 when idle): the stall watchdog's measure, computed here from the "
                          "published timestamp, so it also grows when the backend itself stops publishing. "
                          "Published with the health monitor off too.", "s",
                          (age(names.ENGINE_LAST_PROGRESS_TIMESTAMP, TRITON, names.MODEL_INSTANCE),
                           "{{model_instance}}"), span=8))
        .with_panel(graph("Engine restarts per hour", "Engines replaced in place (HEALTH_RECOVERY=restart), per "
                          "hour (the rate over the panel's interval, times 3600). VllmEngineCrashLoop pages on "
                          "repeated restarts.", "short",
                          (f"sum by ({names.MODEL_INSTANCE}) (rate({sel(names.ENGINE_RESTARTS, TRITON)}"
                           f"[$__rate_interval])) * 3600", "{{model_instance}}"), span=24))
        .with_row(row("Exporter"))
        .with_panel(graph("Metrics errors/s", "Failures inside the metrics path per second, by stage: record "
                          "(vLLM's stat logger) and publish (to Triton). Should be 0; the engine keeps serving.",
                          "short", (sum_rate(names.METRICS_ERRORS, TRITON, f"{names.MODEL_INSTANCE}, {names.STAGE}"),
                                    "{{stage}} {{model_instance}}"), span=24))
        .with_panel(graph("Backend info", f"Versions and switches of each model instance ({names.INFO}).",
                          "none", (sel(names.INFO, TRITON),
                                   "{{model_instance}} vLLM {{vllm_version}} backend {{backend_version}} "
                                   "metrics={{metrics_enabled}} health={{health_check_enabled}}"), span=24))
    )
