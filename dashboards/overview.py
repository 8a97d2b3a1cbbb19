"""Overview: traffic, tokens, latency percentiles, errors, load, KV cache, health and SLO attainment."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import dashboard, row
from dashboards.panels import graph, single
from observability.config import Config, DashboardUID, LatencySLO
from observability.promql import TRITON, TRITON_REFUSED, VLLM, attainment, error_ratio, quantile, sel, sum_rate
from vllm_triton_observable.metrics import names

UID = DashboardUID.OVERVIEW
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
                           sum_rate(names.VLLM_REQUEST_SUCCESS, VLLM)))
        .with_panel(single("Error ratio", "Requests the server failed over those it answered: the backend's "
                           f"{names.REQUESTS_FINISHED} outcome failed over completed + failed (bad input and client "
                           f"cancellations excluded), plus requests Triton refused ({names.TRITON_FAILURE} "
                           f"reason {TRITON_REFUSED}).", "percentunit",
                           error_ratio(TRITON),
                           thresholds=[(None, "green"), (config.error_ratio_warning, "orange"),
                                       (config.error_ratio_critical, "red")]))
        .with_panel(single("Engine health", "1 when every selected engine serves requests "
                           f"({names.ENGINE_HEALTHY}, health monitor on), 0 when one is unhealthy.", "none",
                           f"min({sel(names.ENGINE_HEALTHY, TRITON)})",
                           thresholds=[(None, "red"), (1, "green")]))
        .with_panel(graph("Requests by finish reason", "Finished requests per second by vLLM's finish reason.",
                          "reqps", (sum_rate(names.VLLM_REQUEST_SUCCESS, VLLM, names.FINISHED_REASON),
                                    "{{finished_reason}}"), span=12))
        .with_panel(graph("Tokens/s", "Prompt (input) and generated (output) tokens per second.", "short",
                          (sum_rate(names.VLLM_PROMPT_TOKENS, VLLM), "input"),
                          (sum_rate(names.VLLM_GENERATION_TOKENS, VLLM), "output"), span=12))
        .with_row(row("Latency"))
        .with_panel(latency_panel("Time to first token", names.VLLM_TTFT, "Time to first token"))
        .with_panel(latency_panel("Inter-token latency", names.VLLM_INTER_TOKEN_LATENCY,
                                  "Time between consecutive output tokens"))
        .with_panel(latency_panel("End-to-end latency", names.VLLM_E2E_LATENCY,
                                  "Request latency from arrival to last token"))
    )
    for slo in config.slos:
        board = board.with_panel(slo_tile(slo))
    return (
        board.with_row(row("Load"))
        .with_panel(graph("Running and waiting requests", "Requests in the engine's running batch and in its "
                          "waiting queue (vLLM gauges, summed over engines).", "short",
                          (f"sum({sel(names.VLLM_RUNNING, VLLM)})", "running"),
                          (f"sum({sel(names.VLLM_WAITING, VLLM)})", "waiting")))
        .with_panel(graph("KV-cache usage", "Fraction of the KV cache in use, per model instance and engine.",
                          "percentunit", (f"max by ({names.MODEL}, {names.MODEL_INSTANCE}, {names.ENGINE}) "
                                          f"({sel(names.VLLM_KV_CACHE_USAGE, VLLM)})",
                                          "{{model_instance}} engine {{engine}}"),
                          thresholds=[(None, "green"), (config.kv_cache_warning, "orange")]))
        .with_row(row("Replicas: drill down from the fleet"))
        .with_panel(graph("Requests/s by replica", "Finished requests per second per Triton server (instance); "
                          "the tiles above are the fleet total of the selected instances.", "reqps",
                          (sum_rate(names.VLLM_REQUEST_SUCCESS, VLLM, "instance"), "{{instance}}"), span=8))
        .with_panel(graph("Error ratio by replica", "The error ratio above, per Triton server: one bad replica "
                          "or all of them.", "percentunit", (error_ratio(TRITON, "instance"), "{{instance}}"),
                          span=8, thresholds=[(None, "green"), (config.error_ratio_warning, "orange"),
                                              (config.error_ratio_critical, "red")]))
        .with_panel(graph("TTFT p95 by replica", "95th percentile time to first token per Triton server.", "s",
                          (quantile(0.95, names.VLLM_TTFT, VLLM, "instance"), "{{instance}}"), span=8))
    )
