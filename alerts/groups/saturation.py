"""Saturation users feel: queueing and preemptions page; a full KV cache only warns."""

from __future__ import annotations

from dataclasses import dataclass

from alerts.definitions import ENGINE, INSTANCE, Alert, paging, selector
from observability.config import Config, DashboardUID
from vllm_triton_observable.metrics import names


@dataclass(frozen=True)
class Thresholds:
    """Besides Config's kv_cache_warning, which the dashboards draw too."""

    kv_cache_warning_for: str = "10m"
    waiting_requests_warning: float = 50
    waiting_requests_for: str = "5m"
    waiting_requests_critical: float = 200
    waiting_requests_critical_for: str = "10m"
    preemptions_per_s_warning: float = 1.0
    preemptions_for: str = "5m"
    preemptions_per_s_critical: float = 10.0
    preemptions_critical_for: str = "10m"


def alerts(config: Config) -> list[Alert]:
    t = config.thresholds(Thresholds())
    s = selector(config)  # the Triton targets, in every expression
    kv = f"max by ({ENGINE}) ({names.VLLM_KV_CACHE_USAGE}{s})"
    waiting = f"sum by ({INSTANCE}) ({names.VLLM_WAITING}{s})"
    preemptions = f"sum by ({INSTANCE}) (rate({names.VLLM_PREEMPTIONS}{s}[5m]))"
    return [
        Alert(
            name="VllmKVCacheHigh",
            expr=f"{kv} > {config.kv_cache_warning:g}",
            for_=t.kv_cache_warning_for,
            severity="warning",
            summary="A vLLM engine's KV cache is nearly full.",
            description=(
                "KV cache of {{ $labels.model_instance }} engine {{ $labels.engine }} is "
                "{{ $value | humanizePercentage }} full."),
            meaning=(
                "Running requests hold almost all KV-cache blocks. A warning, never a page: vLLM is built to fill "
                "its KV cache (the more sequences it batches, the higher the throughput), so a healthy server under "
                "load sits here. Users feel it only when requests queue (VllmRequestsQueueing: time to first token "
                "grows) or running ones are preempted and recomputed (VllmHighPreemptionRate); those page."),
            check=f"{names.VLLM_WAITING}, preemptions, prompt and generation lengths, prefix-cache hit ratio.",
            action=(
                "Capacity planning, not an emergency: add capacity (instances, GPU memory via "
                "gpu_memory_utilization), lower max_num_seqs or max_model_len, or raise the prefix-cache hit ratio."),
            dashboard=DashboardUID.SATURATION,
            panel="KV-cache usage (max and mean)",
        ),
        *paging(Alert(
            name="VllmRequestsQueueing",
            expr=f"{waiting} > {t.waiting_requests_warning:g}",
            for_=t.waiting_requests_for,
            severity="warning",
            summary="Requests are queueing in a vLLM engine.",
            description="{{ $value }} requests wait in {{ $labels.model_instance }} on {{ $labels.instance }}.",
            meaning="The engine cannot admit requests as fast as they arrive; time to first token grows.",
            check=f"KV-cache usage, {names.VLLM_WAITING_BY_REASON}, the request rate.",
            action="Scale out (more instances or replicas), or reduce prompt/generation lengths.",
            dashboard=DashboardUID.SATURATION,
            panel="Waiting requests by reason",
        ), f"{waiting} > {t.waiting_requests_critical:g}", t.waiting_requests_critical_for),
        *paging(Alert(
            name="VllmHighPreemptionRate",
            expr=f"{preemptions} > {t.preemptions_per_s_warning:g}",
            for_=t.preemptions_for,
            severity="warning",
            summary="A vLLM engine preempts requests often.",
            description="{{ $labels.model_instance }} preempts {{ $value | humanize }} requests/s.",
            meaning=(
                "The KV cache runs out during generation and the scheduler evicts running requests, which must "
                "recompute: throughput drops and latency grows."),
            check="KV-cache usage, batch size (tokens per step), generation lengths.",
            action="Give the engine more KV cache or admit fewer concurrent sequences (max_num_seqs).",
            dashboard=DashboardUID.SATURATION,
            panel="Preemptions/s",
        ), f"{preemptions} > {t.preemptions_per_s_critical:g}", t.preemptions_critical_for),
    ]
