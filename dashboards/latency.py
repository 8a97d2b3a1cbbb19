"""Latency: distributions as heatmaps, the queue / prefill / decode breakdown, and per-model comparison."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import dashboard, row
from dashboards.panels import graph, heatmap
from dashboards.trace_links import trace_link, traces_variable
from observability.config import Config, DashboardUID
from observability.promql import VLLM, mean, quantile, sum_rate
from vllm_triton_observable.metrics import names

UID = DashboardUID.LATENCY
PHASES = (("queue", names.VLLM_QUEUE_TIME), ("prefill", names.VLLM_PREFILL_TIME),
          ("decode", names.VLLM_DECODE_TIME), ("inference", names.VLLM_INFERENCE_TIME))


def distribution(title: str, histogram: str, what: str) -> object:
    return heatmap(title, f"Distribution of {what} (vLLM's buckets), requests per bucket per second.", "s",
                   sum_rate(histogram + "_bucket", VLLM, "le")).data_links([trace_link()])


def timing(title: str, description: str, *targets: tuple[str, str], span: int) -> object:
    """A latency graph that links to the traces of the requests it measures."""
    return graph(title, description, "s", *targets, span=span).data_links([trace_link()])


def build(config: Config, slo_buckets: dict[str, tuple[float, ...]]) -> Dashboard:
    board = dashboard(UID, "vLLM on Triton / Latency", "Where request time goes (generated).", config, slo_buckets
                      ).with_variable(traces_variable())
    return (
        board.with_row(row("Distributions"))
        .with_panel(distribution("Time to first token", names.VLLM_TTFT, "time to first token"))
        .with_panel(distribution("Inter-token latency", names.VLLM_INTER_TOKEN_LATENCY, "inter-token latency"))
        .with_panel(distribution("End-to-end latency", names.VLLM_E2E_LATENCY, "end-to-end latency"))
        .with_row(row("Breakdown"))
        .with_panel(timing("Mean time per phase", "Mean seconds a request spends waiting in the queue, in "
                           "prefill, in decode, and in the engine overall (inference = prefill + decode).",
                           *((mean(h, VLLM), phase) for phase, h in PHASES), span=12))
        .with_panel(timing("p95 time per phase", "95th percentile of each phase's duration.",
                           *((quantile(0.95, h, VLLM), phase) for phase, h in PHASES), span=12))
        .with_panel(timing("Time per output token (per request)", "p50 and p95 of each finished request's mean "
                           "time per output token.",
                           (quantile(0.5, names.VLLM_TIME_PER_OUTPUT_TOKEN, VLLM), "p50"),
                           (quantile(0.95, names.VLLM_TIME_PER_OUTPUT_TOKEN, VLLM), "p95"), span=12))
        .with_row(row("Per model"))
        .with_panel(timing("TTFT p95 by model", "95th percentile time to first token for each model.",
                           (quantile(0.95, names.VLLM_TTFT, VLLM, names.MODEL), "{{model}}"), span=8))
        .with_panel(timing("Inter-token p95 by model", "95th percentile inter-token latency for each model.",
                           (quantile(0.95, names.VLLM_INTER_TOKEN_LATENCY, VLLM, names.MODEL), "{{model}}"), span=8))
        .with_panel(timing("End-to-end p95 by model", "95th percentile request latency for each model.",
                           (quantile(0.95, names.VLLM_E2E_LATENCY, VLLM, names.MODEL), "{{model}}"), span=8))
    )
