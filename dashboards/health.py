"""Health and exporter: engine health states, probes, restarts, and the metrics pipeline itself."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.config import Config
from dashboards.layout import dashboard, row
from dashboards.panels import graph
from dashboards.promql import TRITON, quantile, sel, sum_rate

UID = "vllm-triton-health"


def build(config: Config, slo_buckets: dict[str, tuple[float, ...]]) -> Dashboard:
    board = dashboard(UID, "vLLM on Triton / Health and exporter", "Engine health monitor and the metrics "
                      "exporter (generated).", config, slo_buckets)
    return (
        board.with_row(row("Engine health"))
        .with_panel(graph("Engine healthy", "1 while the engine serves requests, 0 while unhealthy "
                          "(per model instance).", "none",
                          (sel("vllm_triton_engine_healthy", TRITON), "{{model_instance}}"),
                          thresholds=[(None, "red"), (1, "green")]))
        .with_panel(graph("Health state", "Which state each instance is in (healthy, degraded, unhealthy).", "none",
                          (f"max by (model_instance, state) ({sel('vllm_triton_engine_health_state', TRITON)}) == 1",
                           "{{model_instance}} {{state}}")))
        .with_panel(graph("Probe latency", "p50 and p99 of the active engine probe's round trip.", "s",
                          (quantile(0.5, "vllm_triton_engine_probe_latency_seconds", TRITON), "p50"),
                          (quantile(0.99, "vllm_triton_engine_probe_latency_seconds", TRITON), "p99"), span=8))
        .with_panel(graph("Consecutive probe failures", "Probes failed in a row per instance.", "short",
                          (sel("vllm_triton_engine_probe_consecutive_failures", TRITON), "{{model_instance}}"),
                          span=8))
        .with_panel(graph("Seconds since engine progress", "Seconds without an engine step while requests are "
                          "in flight (0 when idle); the stall watchdog's measure.", "s",
                          (sel("vllm_triton_engine_seconds_since_progress", TRITON), "{{model_instance}}"), span=8))
        .with_panel(graph("Engine restarts", "Engines replaced in place (HEALTH_RECOVERY=restart) per hour.", "short",
                          (f"sum by (model_instance) (increase({sel('vllm_triton_engine_restarts_total', TRITON)}"
                           f"[$__rate_interval]))", "{{model_instance}}"), span=24))
        .with_row(row("Exporter"))
        .with_panel(graph("Metrics errors", "Failures inside the metrics path per second, by stage: record "
                          "(vLLM's stat logger) and publish (to Triton). Should be 0; the engine keeps serving.",
                          "short", (sum_rate("vllm_triton_metrics_errors_total", TRITON, "model_instance, stage"),
                                    "{{stage}} {{model_instance}}")))
        .with_panel(graph("Seconds since vLLM's last stats", "Seconds since the engine last reported stats "
                          "(grows while idle).", "s",
                          (sel("vllm_triton_metrics_seconds_since_last_record", TRITON), "{{model_instance}}")))
        .with_panel(graph("Backend info", "Versions and switches of each model instance (vllm_triton_info).",
                          "none", (sel("vllm_triton_info", TRITON),
                                   "{{model_instance}} vLLM {{vllm_version}} backend {{backend_version}} "
                                   "metrics={{metrics_enabled}} health={{health_check_enabled}}"), span=24))
    )
