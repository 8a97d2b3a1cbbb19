"""Overview: traffic, tokens, latency percentiles, errors, load, KV cache, health and SLO attainment."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.config import Config, LatencySLO
from dashboards.layout import dashboard, row
from dashboards.panels import graph, single
from dashboards.promql import TRITON, VLLM, attainment, error_ratio, quantile, sel, sum_rate

UID = "vllm-triton-overview"
GOOD_RATIO = [(None, "red"), (0.9, "orange"), (0.99, "green")]


def latency_panel(title: str, histogram: str, what: str) -> object:
    return graph(title, f"{what}: p50, p95 and p99 over all selected models and engines.", "s",
                 *((quantile(q, histogram, VLLM), f"p{round(q * 100)}") for q in (0.5, 0.95, 0.99)), span=8)


def slo_tile(slo: LatencySLO) -> object:
    """One tile per configured SLO; its threshold is the dashboard variable `layout` makes for that SLO."""
    variable = f"$slo_{slo.name.lower()}"
    return single(f"{slo.name} SLO attainment", f"Share of requests whose {slo.description} is at or under the "
                  f"{variable} seconds chosen above (a bucket boundary of {slo.histogram}).", "percentunit",
                  attainment(slo.histogram, VLLM, variable), span=4, thresholds=GOOD_RATIO)


def build(config: Config, slo_buckets: dict[str, tuple[float, ...]]) -> Dashboard:
    board = dashboard(UID, "vLLM on Triton / Overview", "Traffic, latency, errors, load and health of vLLM "
                      "models served by Triton (generated; see the project's dashboards/).", config, slo_buckets)
    board = (
        board.with_row(row("Traffic"))
        .with_panel(single("Requests/s", "Finished requests per second (vLLM's request_success).", "reqps",
                           sum_rate("vllm:request_success_total", VLLM)))
        .with_panel(single("Error ratio", "Failed over finished requests: vLLM finished_reason=\"error\" plus "
                           "Triton's nv_inference_request_failure (cancellations excluded).", "percentunit",
                           error_ratio(VLLM, TRITON),
                           thresholds=[(None, "green"), (config.error_ratio_warning, "orange"),
                                       (config.error_ratio_critical, "red")]))
        .with_panel(single("Engine health", "1 when every selected engine serves requests "
                           "(vllm_triton_engine_healthy, health monitor on), 0 when one is unhealthy.", "none",
                           f"min({sel('vllm_triton_engine_healthy', TRITON)})",
                           thresholds=[(None, "red"), (1, "green")]))
        .with_panel(graph("Requests by finish reason", "Finished requests per second by vLLM's finish reason.",
                          "reqps", (sum_rate("vllm:request_success_total", VLLM, "finished_reason"),
                                    "{{finished_reason}}"), span=12))
        .with_panel(graph("Tokens/s", "Prompt (input) and generated (output) tokens per second.", "short",
                          (sum_rate("vllm:prompt_tokens_total", VLLM), "input"),
                          (sum_rate("vllm:generation_tokens_total", VLLM), "output"), span=12))
        .with_row(row("Latency"))
        .with_panel(latency_panel("Time to first token", "vllm:time_to_first_token_seconds", "Time to first token"))
        .with_panel(latency_panel("Inter-token latency", "vllm:inter_token_latency_seconds",
                                  "Time between consecutive output tokens"))
        .with_panel(latency_panel("End-to-end latency", "vllm:e2e_request_latency_seconds",
                                  "Request latency from arrival to last token"))
    )
    for slo in config.slos:
        board = board.with_panel(slo_tile(slo))
    return (
        board.with_row(row("Load"))
        .with_panel(graph("Running and waiting requests", "Requests in the engine's running batch and in its "
                          "waiting queue (vLLM gauges, summed over engines).", "short",
                          (f"sum({sel('vllm:num_requests_running', VLLM)})", "running"),
                          (f"sum({sel('vllm:num_requests_waiting', VLLM)})", "waiting")))
        .with_panel(graph("KV-cache usage", "Fraction of the KV cache in use, per model instance and engine.",
                          "percentunit", (f"max by (model, model_instance, engine) "
                                          f"({sel('vllm:kv_cache_usage_perc', VLLM)})",
                                          "{{model_instance}} engine {{engine}}"),
                          thresholds=[(None, "green"), (config.kv_cache_warning, "orange"),
                                      (config.kv_cache_critical, "red")]))
    )
