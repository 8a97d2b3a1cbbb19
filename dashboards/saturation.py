"""Saturation and cache: KV cache, preemptions, queueing, batch sizes, prefix caching."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import dashboard, row
from dashboards.panels import graph
from observability.config import Config, DashboardUID
from observability.promql import VLLM, mean, quantile, ratio, sel, sum_rate
from vllm_triton_observable.metrics import names

UID = DashboardUID.SATURATION


def build(config: Config, slo_buckets: dict[str, tuple[float, ...]]) -> Dashboard:
    board = dashboard(UID, "vLLM on Triton / Saturation and cache", "How full the engines are (generated).",
                      config, slo_buckets)
    kv = sel(names.VLLM_KV_CACHE_USAGE, VLLM)
    return (
        board.with_row(row("KV cache and scheduling"))
        .with_panel(graph("KV-cache usage (max and mean)", "Highest and mean KV-cache usage over the selected "
                          "engines; sustained values near 1 cause preemptions.", "percentunit",
                          (f"max({kv})", "max"), (f"avg({kv})", "mean"),
                          thresholds=[(None, "green"), (config.kv_cache_warning, "orange")]))
        .with_panel(graph("Preemptions/s", "Requests preempted by the scheduler per second (KV cache exhausted).",
                          "short", (sum_rate(names.VLLM_PREEMPTIONS, VLLM, names.MODEL), "{{model}}")))
        .with_panel(graph("Waiting requests by reason", "Requests waiting for capacity or deferred, per reason.",
                          "short", (f"sum by ({names.REASON}) ({sel(names.VLLM_WAITING_BY_REASON, VLLM)})",
                                    "{{reason}}")))
        .with_panel(graph("Tokens per engine step", "Tokens processed per engine step (prefill + decode): mean "
                          "and p95; the batch size the engine achieves.", "short",
                          (mean(names.VLLM_ITERATION_TOKENS, VLLM), "mean"),
                          (quantile(0.95, names.VLLM_ITERATION_TOKENS, VLLM), "p95")))
        .with_row(row("Caching"))
        .with_panel(graph("Prefix-cache hit ratio", "Prompt tokens found in the prefix cache over prompt tokens "
                          "looked up.", "percentunit",
                          (ratio(sum_rate(names.VLLM_PREFIX_CACHE_HITS, VLLM),
                                 sum_rate(names.VLLM_PREFIX_CACHE_QUERIES, VLLM)), "hit ratio")))
        .with_panel(graph("Cached prompt tokens/s by source", "Prompt tokens per second served from a cache, by "
                          "cache tier.", "short",
                          (sum_rate(names.VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE, VLLM, names.SOURCE), "{{source}}"),
                          family=names.VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE))
        .with_panel(graph("Prompt tokens/s by source", "Prompt tokens per second computed locally, hit in the local "
                          "cache, or transferred from an external KV store.", "short",
                          (sum_rate(names.VLLM_PROMPT_TOKENS_BY_SOURCE, VLLM, names.SOURCE), "{{source}}"),
                          span=24))
    )
